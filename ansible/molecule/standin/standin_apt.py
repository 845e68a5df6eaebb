"""Stand-in Debian packages and the signed flat apt repository that serves them, for the
molecule scenarios of roles that install NVIDIA's packages (nvidia_driver, nccl).

The test hosts have no GPU, no CUDA and no route out. Each role's scenario builds, on the
host, a repository laid out like NVIDIA's CUDA repository whose packages carry the real
names and versions and harmless contents; this module is the part they share: one .deb from
a map of files, and the Packages/Release/InRelease/Release.gpg index signed with a
throwaway key (its public half written as standin-archive-key.asc for the role's
Signed-By). Each role's build_standin_repo.py says what its packages hold; the scenario's
prepare step copies this module beside it on the host and runs it there.

Needs dpkg-deb, apt-ftparchive (apt-utils) and gpg: the testbed image has all three.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

MAINTAINER = "vfleet test stand-in <standin@vfleet.invalid>"
ORIGIN = "vfleet-standin"
LABEL = "vfleet stand-in of NVIDIA CUDA"


def host_arch() -> str:
    return subprocess.run(
        ["dpkg", "--print-architecture"], check=True, capture_output=True, text=True
    ).stdout.strip()


@dataclass
class Package:
    """One stand-in package: `files` maps an absolute path to (content, mode); `note` says
    what it stands in for (its description and a README under /usr/share/doc)."""

    name: str
    version: str
    note: str
    files: dict[str, tuple[str | bytes, int]] = field(default_factory=dict)
    section: str = "libs"
    depends: str = ""
    conflicts: str = ""
    scripts: dict[str, str] = field(default_factory=dict)  # maintainer scripts by name
    arch: str = ""  # empty: the host's


def _control(package: Package, arch: str) -> str:
    fields = [
        f"Package: {package.name}",
        f"Version: {package.version}",
        f"Architecture: {arch}",
        f"Maintainer: {MAINTAINER}",
        f"Section: {package.section}",
        "Priority: optional",
    ]
    if package.depends:
        fields.append(f"Depends: {package.depends}")
    if package.conflicts:
        fields.append(f"Conflicts: {package.conflicts}")
    fields += [f"Description: {package.name} (vfleet test stand-in)", " " + package.note]
    return "\n".join(fields) + "\n"


def build_deb(pool: Path, package: Package) -> Path:
    """Write `package` as a .deb into `pool`; returns its path."""
    arch = package.arch or host_arch()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for path, (content, mode) in package.files.items():
            target = root / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content.encode() if isinstance(content, str) else content)
            target.chmod(mode)
        doc = root / "usr" / "share" / "doc" / package.name
        doc.mkdir(parents=True, exist_ok=True)
        (doc / "README.vfleet-standin").write_text(package.note + "\n")
        control = root / "DEBIAN"
        control.mkdir()
        (control / "control").write_text(_control(package, arch))
        for script, body in package.scripts.items():
            (control / script).write_text(body)
            (control / script).chmod(0o755)
        # Directories made above follow the umask; dpkg wants them 0755.
        for dirpath, _, _ in os.walk(root):
            Path(dirpath).chmod(0o755)
        out = pool / f"{package.name}_{package.version}_{arch}.deb"
        subprocess.run(
            ["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(root), str(out)],
            check=True,
            capture_output=True,
        )
    return out


def _run(argv: list[str], cwd: Path | None = None) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, cwd=cwd).stdout


def index_and_sign(out: Path) -> None:
    """Packages, Release, InRelease and Release.gpg of the flat repository in `out`."""
    (out / "Packages").write_text(_run(["apt-ftparchive", "packages", "."], cwd=out))
    release = [
        "apt-ftparchive",
        "-o",
        f"APT::FTPArchive::Release::Origin={ORIGIN}",
        "-o",
        f"APT::FTPArchive::Release::Label={LABEL}",
        "release",
        ".",
    ]
    (out / "Release").write_text(_run(release, cwd=out))
    with tempfile.TemporaryDirectory() as home:
        gpg = ["gpg", "--homedir", home, "--batch", "--yes", "--pinentry-mode", "loopback"]
        gpg += ["--passphrase", ""]
        identity = "vfleet stand-in archive <standin@vfleet.invalid>"
        _run([*gpg, "--quick-gen-key", identity, "ed25519", "sign", "never"])
        (out / "standin-archive-key.asc").write_text(_run([*gpg, "--armor", "--export"]))
        _run([*gpg, "--clearsign", "-o", str(out / "InRelease"), str(out / "Release")])
        signature = str(out / "Release.gpg")
        _run([*gpg, "--detach-sign", "--armor", "-o", signature, str(out / "Release")])
        _run(["gpgconf", "--homedir", home, "--kill", "all"])

"""Writing a render to `--out` all at once.

The files go into a fresh directory next to `--out` (same filesystem), which then takes
its place: the old one is renamed aside, the new one renamed in, the old one removed. A
failure at any point before the swap leaves the previous render whole; after it, no engine
directory of an earlier render survives. Every target is checked to lie inside the new
directory before the first byte is written, a `--out` holding files that no render wrote
is refused rather than replaced (the swap would delete them), and so is a `--out` that is
or lies under a symbolic link (the swap would replace what it points at).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from vfleet.errors import UserError

# What a previous render leaves at the top of --out: these files and one folder per host.
TOP_FILES = frozenset({"endpoints.json", "firewall.json"})
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def mode_of(rel: str) -> int:
    """launch.sh is run by the unit's bash but kept executable; everything else is data."""
    return 0o755 if rel.endswith(".sh") else 0o644


def _symlink_on_the_way(out: Path) -> Path | None:
    """The first symbolic link among `out` and the folders above it, as written."""
    path = Path(os.path.abspath(out))
    for part in (*reversed(path.parents), path):
        if part.is_symlink():
            return part
    return None


def host_render_owns(entry: Path) -> bool:
    """What a host render leaves at the top of --out: its top files and one folder per host."""
    if entry.name in TOP_FILES:
        return entry.is_file()
    return bool(_LABEL.fullmatch(entry.name)) and entry.is_dir() and not entry.is_symlink()


def check_out(out: Path, owns: Callable[[Path], bool] = host_render_owns) -> Path:
    """The resolved `--out`, or a UserError if it cannot be a render's directory.

    A link on the way is refused: a render replaces the whole directory, and a `--out`
    that is (or lies under) a link to /etc would replace what the link points at. Passing
    the resolved path is how a user says they mean it."""
    link = _symlink_on_the_way(out)
    if link is not None:
        shown = (
            "is a symbolic link"
            if link == Path(os.path.abspath(out))
            else (f"lies under the symbolic link {link}")
        )
        raise UserError(
            f"--out {out} {shown}: pass the resolved path {out.resolve()} if that is "
            "where the render should go"
        )
    real = out.resolve()
    for parent in (real, *real.parents):
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                shown = "is a file" if parent == real else f"lies under the file {parent}"
                raise UserError(f"--out {out} {shown}: pass a directory")
            break
    if real == Path(real.anchor) or real == Path.home().resolve():
        raise UserError(
            f"--out {out} is {real}: pass a directory of its own, e.g. artifacts/launch"
        )
    if real.is_dir():
        strangers = sorted(entry.name for entry in real.iterdir() if not owns(entry))
        if strangers:
            raise UserError(
                f"--out {out} holds {strangers[0]!r}, which no render wrote, and a render "
                "replaces the whole directory: pass a new or empty directory"
            )
    return real


def _targets(root: Path, files: Mapping[str, str]) -> dict[Path, str]:
    """Each relative name as a path inside `root`, or a UserError before anything is written."""
    out: dict[Path, str] = {}
    for rel, content in files.items():
        parts = Path(rel).parts
        target = (root / rel).resolve()
        if Path(rel).is_absolute() or ".." in parts or not target.is_relative_to(root):
            raise UserError(
                f"render would write {rel[:80]!r} outside --out: host names and engine ids must "
                "be plain labels (e.g. gpu-node-01)"
            )
        out[target] = content
    return out


def _write(path: Path, content: str, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        os.fchmod(handle.fileno(), mode)  # exactly this mode, whatever the umask
        handle.write(content)


def write_render(
    out: Path, files: Mapping[str, str], owns: Callable[[Path], bool] = host_render_owns
) -> Path:
    """Replace `out` with exactly `files` (relative path -> text); returns the resolved out.
    `owns` says which entries an earlier render of the same kind left there."""
    real = check_out(out, owns)
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{real.name}.new-", dir=real.parent))
    except OSError as exc:
        raise UserError(f"cannot create --out {out}: {exc.strerror or exc}") from None
    try:
        staging.chmod(0o755)
        targets = _targets(staging.resolve(), files)
        for target, content in targets.items():
            _write(target, content, mode_of(str(target)))
        for folder in (p for p in staging.rglob("*") if p.is_dir()):
            folder.chmod(0o755)
        _swap(staging, real)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise UserError(
            f"cannot write the render to {out}: {exc.strerror or exc}; the previous render "
            "is untouched"
        ) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return real


def _swap(staging: Path, real: Path) -> None:
    if not real.exists():
        os.rename(staging, real)
        return
    old = real.with_name(f".{real.name}.old-{secrets.token_hex(4)}")
    os.rename(real, old)
    try:
        os.rename(staging, real)
    except OSError:
        os.rename(old, real)  # put the previous render back
        raise
    shutil.rmtree(old, ignore_errors=True)

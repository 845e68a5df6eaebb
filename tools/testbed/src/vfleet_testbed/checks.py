"""What `testbed` checks before it touches anything: the machine (root, the tools it runs)
and the request (host count, profile, shape, names, `--bind-ro` paths). Each refusal is a
UsageError (exit 2) with one line that says what to change."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from vfleet_testbed import base, network
from vfleet_testbed.errors import UsageError
from vfleet_testbed.profiles import PROFILES, SHAPES

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
HOST_RE = re.compile(r"^[a-z][a-z0-9-]{0,12}$")  # v-<host> must fit IFNAMSIZ
RESERVED_HOSTS = {"hub", "ctl"}
TOOLS = {
    "ip": "iproute2",
    "tc": "iproute2",
    "systemd-nspawn": "systemd-container",
    "nc": "netcat-openbsd",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
}


def check_machine(need_debootstrap: bool) -> None:
    if os.geteuid() != 0:
        raise UsageError("testbed needs root (network namespaces, systemd-nspawn); run as root")
    tools = dict(TOOLS, debootstrap="debootstrap") if need_debootstrap else TOOLS
    missing = sorted({pkg for tool, pkg in tools.items() if shutil.which(tool) is None})
    if missing:
        raise UsageError(f"missing tools; apt-get install {' '.join(missing)}")


def host_profiles(profile: str, count: int) -> list[str]:
    """Each host's profile from `--profile`: one for every host, or one per host in order
    (comma-separated); UsageError (exit 2) with one line otherwise."""
    profiles = [p.strip() for p in profile.split(",")]
    for each in profiles:
        if each not in PROFILES:
            raise UsageError(f"unknown profile {each!r}; choose one of: {', '.join(PROFILES)}")
    if len(profiles) == 1:
        return profiles * count
    if len(profiles) != count:
        raise UsageError(
            f"--profile lists {len(profiles)} profiles for N={count}: give 1 or {count}"
        )
    return profiles


def validate(
    count: int, profile: str, name: str, shape: str | None, hosts: list[str] | None
) -> tuple[list[str], list[str]]:
    """Host names and each host's profile for a valid request; UsageError (exit 2) with one
    line otherwise."""
    if count < 1:
        raise UsageError(f"N must be at least 1 (got {count})")
    if count > network.MAX_HOSTS:
        raise UsageError(f"N must be at most {network.MAX_HOSTS} (got {count})")
    profiles = host_profiles(profile, count)
    if shape is not None and shape not in SHAPES:
        raise UsageError(f"unknown shape {shape!r}; choose one of: {', '.join(SHAPES)}")
    if not NAME_RE.match(name):
        raise UsageError(f"bad name {name!r}: 1-32 of a-z 0-9 _ -, starting with a letter/digit")
    names = hosts or [f"h{i + 1}" for i in range(count)]
    if len(names) != count:
        raise UsageError(f"--hosts lists {len(names)} names for N={count}")
    for host in names:
        if not HOST_RE.match(host) or host in RESERVED_HOSTS:
            raise UsageError(
                f"bad host name {host!r}: 1-13 of a-z 0-9 -, starting with a letter; not hub or ctl"
            )
    if len(set(names)) != len(names):
        raise UsageError("--hosts repeats a name")
    return names, profiles


def parse_bind_ro(specs: list[str]) -> list[str]:
    """`SRC[:DST]` specs as "SRC:DST" (absolute, normalised); UsageError (exit 2) otherwise."""
    binds: list[str] = []
    targets: set[str] = set()
    gpu = Path(base.GPU_MOUNT)
    for spec in specs:
        src, sep, dst = spec.partition(":")
        dst = dst if sep else src
        # nspawn reads a further ':' as mount options; paths with one are not worth escaping.
        if not src or not dst or ":" in dst:
            raise UsageError(f"bad --bind-ro {spec!r}: want SRC[:DST], paths without ':'")
        if not (src.startswith("/") and dst.startswith("/")):
            raise UsageError(f"bad --bind-ro {spec!r}: SRC and DST must be absolute paths")
        src, dst = os.path.normpath(src), os.path.normpath(dst)
        if not Path(src).exists():
            raise UsageError(f"bad --bind-ro {spec!r}: {src} does not exist")
        target = Path(dst)
        # The GPU fixture is bound at GPU_MOUNT; a bind on, above or below it would hide it.
        if dst == "/" or target == gpu or gpu in target.parents or target in gpu.parents:
            raise UsageError(f"bad --bind-ro {spec!r}: {dst} is / or overlaps {base.GPU_MOUNT}")
        if dst in targets:
            raise UsageError(f"bad --bind-ro {spec!r}: another bind already targets {dst}")
        targets.add(dst)
        binds.append(f"{src}:{dst}")
    return binds

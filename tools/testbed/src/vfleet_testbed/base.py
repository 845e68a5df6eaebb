"""The cached base image every test host boots from, and the SSH key that opens them.

Built once per machine with debootstrap (minbase + what the hosts and the roles need) into
`$VFLEET_CACHE/testbed/base-bookworm` (default `/var/cache/vfleet/testbed/`), about 2 min
and 350 MB. Hosts boot it with `--volatile=overlay`, so nothing they do reaches the image.
A stamp file records the recipe; when `PACKAGES` or `RECIPE` change, the next `testbed up`
rebuilds the image next to the old one and swaps it in.

The hosts have no route out, so a role can only install packages that are already here:
this list is the test hosts' whole package universe (plus the apt cache, see
`OFFLINE_DEBS`).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from vfleet_testbed.errors import TestbedError

SUITE = "bookworm"
# Bump when the customisation below changes: it forces a rebuild of cached images.
RECIPE = 2
PACKAGES: tuple[str, ...] = (
    # a booting host reachable over SSH
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "sudo",
    "iproute2",
    "iputils-ping",
    "netcat-openbsd",
    # Ansible on the host: python3, the apt module's bindings, venvs for later roles
    "python3",
    "python3-apt",
    "python3-venv",
    # apt-ftparchive: tests index local apt repositories (the offline-mirror path)
    "apt-utils",
    # the `common` role's base packages (its defaults must stay a subset of this list)
    "ca-certificates",
    "curl",
    "gnupg",
    "jq",
    "kmod",
    "less",
    "lsof",
    "procps",
    "rsync",
    "pciutils",
    "numactl",
    "ethtool",
    "iperf3",
    "systemd-timesyncd",
    # vLLM's compiled extension links libnuma
    "libnuma1",
)
# Downloaded into the image's apt cache but not installed, so that a role can switch to them
# offline (apt installs a cached .deb without the network): chrony replaces timesyncd.
# make: the nccl role builds nccl-tests; nftables: the firewall role installs it.
OFFLINE_DEBS: tuple[str, ...] = ("chrony", "make", "nftables")
# Units that would only disturb tests: periodic jobs that touch apt or disks.
MASKED_UNITS = (
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "fstrim.timer",
)
GPU_MOUNT = "/opt/vfleet/gpu"  # the profile's fixture, bound read-only at boot
# The stand-in driver's kernel messages: a container has no kernel log of its own, so the
# probe reads the driver's Xid lines here (topology_probe_kernel_log). Empty: none logged;
# a test appends a real capture's lines to make the stand-in report one.
STANDIN_KERNEL_LOG = "/var/log/nvidia-standin/kernel.log"
STANDIN = "nvidia-smi-standin"


def cache_dir() -> Path:
    """$VFLEET_TESTBED_CACHE, else $VFLEET_CACHE/testbed, else /var/cache/vfleet/testbed."""
    explicit = os.environ.get("VFLEET_TESTBED_CACHE")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("VFLEET_CACHE", "/var/cache/vfleet")) / "testbed"


def image_dir() -> Path:
    return cache_dir() / f"base-{SUITE}"


def key_path() -> Path:
    return cache_dir() / "id_ed25519"


def _stamp() -> dict[str, object]:
    return {
        "suite": SUITE,
        "recipe": RECIPE,
        "packages": sorted(PACKAGES),
        "offline_debs": sorted(OFFLINE_DEBS),
    }


def _stamp_file(image: Path) -> Path:
    return image / "etc" / "vfleet-testbed-image.json"


def image_is_current(image: Path | None = None) -> bool:
    image = image or image_dir()
    try:
        recorded = json.loads(_stamp_file(image).read_text())
    except (OSError, ValueError):
        return False
    return all(recorded.get(k) == v for k, v in _stamp().items())


def debian_mirror() -> str:
    """$VFLEET_TESTBED_MIRROR, else the mirror this machine's apt uses, else deb.debian.org."""
    explicit = os.environ.get("VFLEET_TESTBED_MIRROR")
    if explicit:
        return explicit
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.is_file():
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:") and line.split()[1:]:
                return line.split()[1]
    legacy = Path("/etc/apt/sources.list")
    if legacy.is_file():
        for line in legacy.read_text().splitlines():
            words = line.split()
            if len(words) >= 3 and words[0] == "deb" and "security" not in words[1]:
                return words[2] if words[1].startswith("[") else words[1]
    return "http://deb.debian.org/debian"


@contextmanager
def cache_lock() -> Iterator[None]:
    """One builder at a time: a second `testbed up` waits for the first one's image."""
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run(argv: list[str], what: str, timeout: float) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise TestbedError(f"{what} failed (exit {proc.returncode}): {' | '.join(tail)}")


def ensure_key() -> Path:
    key = key_path()
    if not key.is_file() or not key.with_suffix(".pub").is_file():
        key.unlink(missing_ok=True)
        key.with_suffix(".pub").unlink(missing_ok=True)
        _run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "vfleet-testbed", "-f", str(key)],
            "ssh-keygen",
            30,
        )
    return key


def _customise(root: Path, public_key: str) -> None:
    """Make the image a test host: key login, its own hostname, the GPU stand-in's link and
    kernel log."""
    (root / "etc" / "hostname").unlink(missing_ok=True)  # it would override --hostname
    (root / "etc" / "machine-id").write_text("")  # each boot gets its own id
    ssh_dir = root / "root" / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    (ssh_dir / "authorized_keys").write_text(public_key)
    (ssh_dir / "authorized_keys").chmod(0o600)
    (root / "etc" / "ssh" / "sshd_config.d" / "vfleet-testbed.conf").write_text(
        "# vfleet testbed: key login as root only, no reverse lookups (there is no DNS)\n"
        "PermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\n"
        "UseDNS no\n"
        "MaxStartups 64:30:128\n"
    )
    for unit in MASKED_UNITS:
        link = root / "etc" / "systemd" / "system" / unit
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")
    (root / GPU_MOUNT.lstrip("/")).mkdir(parents=True, exist_ok=True)
    smi = root / "usr" / "local" / "bin" / "nvidia-smi"
    smi.unlink(missing_ok=True)
    # Dangles until a profile's fixture is bound at GPU_MOUNT; the stand-in finds its fixture
    # by resolving this link.
    smi.symlink_to(f"{GPU_MOUNT}/{STANDIN}")
    kernel_log = root / STANDIN_KERNEL_LOG.lstrip("/")
    kernel_log.parent.mkdir(parents=True, exist_ok=True)
    kernel_log.write_text("")


def build_image(busy: Callable[[], list[str]] | None = None) -> float:
    """Build the base image (debootstrap + customisation); returns the seconds it took.

    `busy` names the testbeds still running: while there are any, the replaced image is
    kept as `base-<suite>.old.<ns>` (their hosts' overlays still read it) until a build
    finds nothing running.
    """
    for tool in ("debootstrap", "systemd-nspawn", "ssh-keygen"):
        if shutil.which(tool) is None:
            raise TestbedError(f"{tool} not found: apt-get install debootstrap systemd-container")
    start = time.monotonic()
    image = image_dir()
    work = image.with_name(image.name + ".building")
    if not (busy and busy()):  # images kept by earlier builds for hosts now gone
        for stale in image.parent.glob(f"{image.name}.old*"):
            shutil.rmtree(stale)
    key = ensure_key()
    mirror = debian_mirror()
    # A finished debootstrap of the same recipe is reused when a later step failed.
    marker = work / ".vfleet-debootstrap-done"
    done = marker.is_file() and marker.read_text() == json.dumps(_stamp())
    if not done:
        if work.exists():
            shutil.rmtree(work)
        _run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(PACKAGES)}",
                SUITE,
                str(work),
                mirror,
            ],
            f"debootstrap {SUITE} from {mirror}",
            1800,
        )
        marker.write_text(json.dumps(_stamp()))
    # Refresh the apt lists (the hosts' package universe) and cache the offline .debs: a plain
    # nspawn without --boot or a private network shares this machine's network.
    nspawn = ["systemd-nspawn", "--quiet", "--register=no", "--keep-unit", "-D", str(work)]
    _run([*nspawn, "apt-get", "-qq", "update"], "apt-get update in the image", 600)
    # debootstrap leaves every .deb it installed in the cache (about 130 MB): drop them.
    _run([*nspawn, "apt-get", "clean"], "apt-get clean in the image", 120)
    _run(
        [*nspawn, "apt-get", "-qq", "--download-only", "install", *OFFLINE_DEBS],
        "caching the offline packages",
        600,
    )
    _customise(work, key.with_suffix(".pub").read_text())
    marker.unlink()
    seconds = time.monotonic() - start
    stamp = dict(_stamp(), built_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), seconds=seconds)
    _stamp_file(work).write_text(json.dumps(stamp, indent=1) + "\n")
    old = image.with_name(f"{image.name}.old.{time.time_ns()}")
    if image.exists():
        image.rename(old)  # hosts running on it keep their overlay: a rename keeps the inode
    work.rename(image)
    if old.exists() and not (busy and busy()):
        shutil.rmtree(old, ignore_errors=True)
    return seconds


def ensure_image(
    rebuild: bool = False, busy: Callable[[], list[str]] | None = None
) -> tuple[Path, float | None]:
    """The current base image, built if missing or stale; (path, seconds spent building)."""
    with cache_lock():
        key = ensure_key()
        if not rebuild and image_is_current():
            # A key made after the image (the old one was deleted) must still open the hosts.
            authorized = image_dir() / "root" / ".ssh" / "authorized_keys"
            public = key.with_suffix(".pub").read_text()
            if authorized.read_text() != public:
                authorized.write_text(public)
            return image_dir(), None
        return image_dir(), build_image(busy)

#!/usr/bin/env python3
"""Build a signed local apt repository of stand-in NVIDIA driver packages on a test host.

The testbed hosts have no GPU and no route out, so the nvidia_driver role is tested against
a flat apt repository (the layout of NVIDIA's CUDA repository) holding packages with the
real names and versions of NVIDIA's Debian packages, whose contents are harmless:

- nvidia-kernel-open-dkms, nvidia-kernel-dkms: a DKMS-like postinst that writes ELF files
  with a real `.modinfo` section (version, vermagic of the running kernel) as
  `/lib/modules/$(uname -r)/updates/dkms/nvidia*.ko` and runs depmod, so that `modinfo nvidia`
  answers as on a real host; nothing is ever loaded;
- nvidia-driver-cuda: `/usr/bin/nvidia-smi`, which replays the testbed profile's recorded GPUs
  (`/opt/vfleet/gpu`, tests/data/gpu-hosts/nvidia-smi-standin) with this package's driver
  and CUDA versions;
- libcuda1: a marker file (no library);
- nvidia-persistenced: a `nvidia-persistenced` that forks a `sleep` and writes its pid file,
  and the upstream unit;
- nvidia-fabricmanager (nvidia-fabricmanager-<branch> before 580): a `nv-fabricmanager`
  that sleeps, and `nvidia-fabricmanager.service`;
- nvidia-driver-pinning-<version>: an apt preferences file that pins the driver packages to
  that version.

Every version given with --driver gets the whole set, so the repository offers versions
older and newer than the role's pin (the test checks the newer one is not installed).
The repository is signed with a throwaway key made here; its public half is written as
standin-archive-key.asc for the role's Signed-By.

Usage: build_standin_repo.py OUT --driver VERSION:CUDA [--driver ...]
Needs dpkg-deb, apt-ftparchive (apt-utils) and gpg: the testbed image has all three.
"""

from __future__ import annotations

import argparse
import shutil
import textwrap
from pathlib import Path

# Copied beside this file on the host by the scenario's prepare step (ansible/molecule/standin).
import standin_apt
from standin_apt import Package

REVISION = "1"  # NVIDIA's CUDA repository for Debian: <upstream>-1
STANDIN_NOTE = (
    "vfleet test stand-in: this package has the name and version of NVIDIA's package but "
    "contains no driver; it only lets the nvidia_driver role run on hosts without a GPU."
)

# Writes a minimal relocatable ELF object whose .modinfo section holds the given fields:
# enough for depmod to index it and for modinfo to print it. Runs at install time, on the
# host, for the kernel that is running there (as DKMS builds for it).
KO_WRITER = r'''#!/usr/bin/env python3
"""vfleet stand-in "DKMS build": fake nvidia*.ko files for the running kernel (never loaded)."""
import struct, subprocess, sys
from pathlib import Path

version, kernel = sys.argv[1], sys.argv[2]
moddir = Path("/lib/modules") / kernel / "updates" / "dkms"


def elf(fields):
    modinfo = b"".join(f"{k}={v}".encode() + b"\0" for k, v in fields)
    names = b"\0.modinfo\0.shstrtab\0"
    shoff = (64 + len(modinfo) + len(names) + 7) & ~7
    head = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    head += struct.pack("<HHIQQQIHHHHHH", 1, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 3, 2)
    body = head + modinfo + names
    body += bytes(shoff - len(body))
    sections = bytes(64)
    sections += struct.pack("<IIQQQQIIQQ", 1, 1, 0, 0, 64, len(modinfo), 0, 0, 1, 0)
    sections += struct.pack("<IIQQQQIIQQ", 10, 3, 0, 0, 64 + len(modinfo), len(names), 0, 0, 1, 0)
    return body + sections


moddir.mkdir(parents=True, exist_ok=True)
for name, desc in (("nvidia", "NVIDIA GPU driver"), ("nvidia-peermem", "NVIDIA GPUDirect RDMA")):
    fields = [
        ("version", version),
        ("license", "Dual MIT/GPL"),
        ("description", desc + " (vfleet stand-in, not a driver)"),
        ("name", name.replace("-", "_")),
        ("vermagic", kernel + " SMP preempt mod_unload modversions "),
    ]
    (moddir / (name + ".ko")).write_bytes(elf(fields))
subprocess.run(["depmod", "-a", kernel], check=True, stderr=subprocess.DEVNULL)
'''

NVIDIA_SMI = r"""#!/bin/sh
# Stand-in nvidia-smi of the vfleet test package nvidia-driver-cuda @VERSION@: replays the
# testbed profile's recorded GPUs (tests/data/gpu-hosts/nvidia-smi-standin and its fixture,
# bound at /opt/vfleet/gpu) with this package's driver and CUDA versions in place of the
# recorded ones. No GPU is involved.
set -eu
version=@VERSION@
cuda=@CUDA@
VFLEET_GPU_FIXTURE="${VFLEET_GPU_FIXTURE:-/opt/vfleet/gpu}"
export VFLEET_GPU_FIXTURE
replay="$VFLEET_GPU_FIXTURE/nvidia-smi-standin"

xml() {
  "$replay" -q -x | sed \
    -e "s|<driver_version>[^<]*</driver_version>|<driver_version>$version</driver_version>|" \
    -e "s|<cuda_version>[^<]*</cuda_version>|<cuda_version>$cuda</cuda_version>|"
}

case "$*" in
  "-q -x" | "-x -q") xml ;;
  "--query-gpu=driver_version --format=csv,noheader")
    gpus=$(xml | grep -c '<gpu id=')
    i=0
    while [ "$i" -lt "$gpus" ]; do echo "$version"; i=$((i + 1)); done ;;
  "--version")
    printf 'NVIDIA-SMI version  : %s\nDRIVER version      : %s\nCUDA Version        : %s\n' \
      "$version" "$version" "$cuda" ;;
  "")
    gpus=$(xml | grep -c '<gpu id=')
    product=$(xml | sed -n 's|.*<product_name>\(.*\)</product_name>.*|\1|p' | head -n 1)
    rule="+$(printf '%89s' '' | tr ' ' -)+"
    echo "$rule"
    printf '| NVIDIA-SMI %-22s Driver Version: %-14s CUDA Version: %-9s|\n' \
      "$version" "$version" "$cuda"
    printf '| %-88s|\n' "vfleet stand-in: $gpus x $product replayed from the testbed profile"
    echo "$rule" ;;
  *) exec "$replay" "$@" ;;
esac
"""

PERSISTENCED = """#!/bin/sh
# Stand-in nvidia-persistenced (vfleet test package @VERSION@): forks a sleeper the way the
# real daemon forks, writes the pid file the unit names, and records its command line.
set -eu
mkdir -p /run/nvidia-persistenced
echo "$*" > /run/nvidia-persistenced/args
sleep infinity </dev/null >/dev/null 2>&1 &
echo "$!" > /run/nvidia-persistenced/nvidia-persistenced.pid
"""

# The unit of NVIDIA's nvidia-persistenced (init/systemd template of the open-source daemon).
PERSISTENCED_UNIT = """[Unit]
Description=NVIDIA Persistence Daemon (vfleet stand-in)
Wants=syslog.target

[Service]
Type=forking
PIDFile=/run/nvidia-persistenced/nvidia-persistenced.pid
Restart=always
ExecStart=/usr/bin/nvidia-persistenced --verbose
ExecStopPost=/bin/rm -rf /run/nvidia-persistenced

[Install]
WantedBy=multi-user.target
"""

FABRICMANAGER = """#!/bin/sh
# Stand-in nv-fabricmanager (vfleet test package @VERSION@): there is no NVSwitch to train;
# it only sleeps so that the service is active.
case "${1:-}" in
  --version | -v) echo "Fabric Manager version is : @VERSION@"; exit 0 ;;
esac
exec sleep infinity
"""

FABRICMANAGER_UNIT = """[Unit]
Description=NVIDIA fabric manager service (vfleet stand-in)

[Service]
Type=simple
ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg

[Install]
WantedBy=multi-user.target
"""

DKMS_POSTINST = """#!/bin/sh
# Stand-in DKMS build: fake modules for the running kernel, as DKMS builds for it.
set -e
if [ "$1" = configure ]; then
  python3 /usr/src/nvidia-@VERSION@/vfleet-standin-build.py @VERSION@ "$(uname -r)"
fi
"""

DKMS_PRERM = """#!/bin/sh
set -e
rm -f "/lib/modules/$(uname -r)/updates/dkms/nvidia.ko" \\
      "/lib/modules/$(uname -r)/updates/dkms/nvidia-peermem.ko"
depmod -a "$(uname -r)" 2>/dev/null || true
"""


def build_deb(
    pool: Path,
    name: str,
    version: str,
    files: dict[str, tuple[str | bytes, int]],
    depends: str = "",
    conflicts: str = "",
    scripts: dict[str, str] | None = None,
    arch: str = "",
) -> None:
    """One nvidia_driver stand-in .deb (standin_apt.build_deb with this role's note)."""
    package = Package(name, version, STANDIN_NOTE, dict(files), "non-free/libs", depends, conflicts)
    package.scripts, package.arch = dict(scripts or {}), arch
    standin_apt.build_deb(pool, package)


def driver_set(pool: Path, upstream: str, cuda: str) -> None:
    """Every stand-in package of one driver release."""
    version = f"{upstream}-{REVISION}"
    branch = int(upstream.split(".")[0])

    def sub(text: str) -> str:
        return text.replace("@VERSION@", upstream).replace("@CUDA@", cuda)

    for flavour, other in (
        ("nvidia-kernel-open-dkms", "nvidia-kernel-dkms"),
        ("nvidia-kernel-dkms", "nvidia-kernel-open-dkms"),
    ):
        build_deb(
            pool,
            flavour,
            version,
            {f"/usr/src/nvidia-{upstream}/vfleet-standin-build.py": (KO_WRITER, 0o755)},
            depends="python3, kmod",
            conflicts=other,
            scripts={"postinst": sub(DKMS_POSTINST), "prerm": DKMS_PRERM},
        )
    # A loose dependency, as NVIDIA's metapackages have: only explicit pins keep
    # nvidia-persistenced at the driver's version.
    build_deb(
        pool,
        "nvidia-driver-cuda",
        version,
        {"/usr/bin/nvidia-smi": (sub(NVIDIA_SMI), 0o755)},
        depends=f"libcuda1 (= {version}), nvidia-persistenced (>= {upstream})",
    )
    build_deb(pool, "libcuda1", version, {})
    build_deb(
        pool,
        "nvidia-persistenced",
        version,
        {
            "/usr/bin/nvidia-persistenced": (sub(PERSISTENCED), 0o755),
            "/lib/systemd/system/nvidia-persistenced.service": (PERSISTENCED_UNIT, 0o644),
        },
    )
    build_deb(
        pool,
        "nvidia-fabricmanager" if branch >= 580 else f"nvidia-fabricmanager-{branch}",
        version,
        {
            "/usr/bin/nv-fabricmanager": (sub(FABRICMANAGER), 0o755),
            "/usr/share/nvidia/nvswitch/fabricmanager.cfg": (
                "# vfleet stand-in fabric manager configuration\nFM_STAY_RESIDENT_ON_FAILURES=0\n",
                0o644,
            ),
            "/lib/systemd/system/nvidia-fabricmanager.service": (FABRICMANAGER_UNIT, 0o644),
        },
    )
    pinned = (
        "nvidia-kernel-open-dkms nvidia-kernel-dkms nvidia-driver-cuda libcuda1 "
        "nvidia-persistenced nvidia-fabricmanager"
    )
    build_deb(
        pool,
        f"nvidia-driver-pinning-{upstream}",
        version,
        {
            # apt reads only files named *.pref (or without a dot) in preferences.d.
            f"/etc/apt/preferences.d/nvidia-driver-pinning-{upstream}.pref": (
                f"# vfleet stand-in of NVIDIA's version-locking package for {upstream}\n"
                f"Package: {pinned}\nPin: version {upstream}-*\nPin-Priority: 1000\n",
                0o644,
            )
        },
        arch="all",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--driver", action="append", required=True, metavar="VERSION:CUDA")
    args = parser.parse_args()
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    for spec in args.driver:
        upstream, cuda = spec.split(":")
        driver_set(args.out, upstream, cuda)
    (args.out / "README").write_text(
        textwrap.fill(STANDIN_NOTE + " Built by the role's molecule prepare step.", 92) + "\n"
    )
    standin_apt.index_and_sign(args.out)
    args.out.chmod(0o755)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

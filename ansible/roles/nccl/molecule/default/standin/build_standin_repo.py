#!/usr/bin/env python3
"""Build a signed local apt repository of stand-in NCCL and CUDA compiler packages on a test host.

The testbed hosts have no GPU, no CUDA and no route out. The nccl role is tested against a
flat apt repository (the layout of NVIDIA's CUDA repository) with packages of the real
names and versions and harmless contents:

- libnccl2: a marker file (no library);
- libnccl-dev: `/usr/include/nccl.h` with the release's NCCL_MAJOR/MINOR/PATCH (nothing else);
- cuda-nvcc-13-0: `/usr/local/cuda-13.0/bin/nvcc`, which answers `--version` and "compiles"
  each `-o OUT` into a shell script that prints what it was built with; its postinst registers
  /usr/local/cuda with update-alternatives as the CUDA packages do.

It also writes nccl-tests-<version>.tar.gz, a stand-in of NVIDIA's nccl-tests source: a
Makefile with the real one's variables and targets (src.build, clean; MPI, CUDA_HOME,
NCCL_HOME, NVCC_GENCODE, build/) over placeholder sources, so the role's download, unpack
and `make` path runs for real with the stand-in nvcc.

Each --nccl version gets libnccl2 and libnccl-dev, so the repository offers a release newer
than the pin. Extra .debs given with --add (real ones, e.g. make from the testbed image's
apt cache) are copied in. The repository is signed with a throwaway key made here
(standin-archive-key.asc).

Usage: build_standin_repo.py OUT --nccl VERSION [--nccl ...] --nvcc VERSION --tests VERSION
                             [--add DEB ...]
Needs dpkg-deb, apt-ftparchive (apt-utils), gpg and tar: the testbed image has them.
"""

from __future__ import annotations

import argparse
import io
import re
import shutil
import tarfile
from pathlib import Path

# Copied beside this file on the host by the scenario's prepare step (ansible/molecule/standin).
import standin_apt
from standin_apt import Package

NOTE = (
    "vfleet test stand-in: this package has the name and version of NVIDIA's package but "
    "contains none of it; it only lets the nccl role run on hosts without CUDA."
)

NVCC = """#!/bin/sh
# Stand-in nvcc of the vfleet test package cuda-nvcc-@SERIES@ (@VERSION@): no compiler.
# Each `-o OUT` becomes a shell script that says what it was built from and with what flags.
set -eu
if [ "${1:-}" = --version ]; then
  echo "nvcc: NVIDIA (R) Cuda compiler driver (vfleet stand-in)"
  echo "Cuda compilation tools, release @RELEASE@, V@VERSION@"
  exit 0
fi
all="$*"
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out=$2; shift 2 ;;
    *) shift ;;
  esac
done
[ -n "$out" ] || { echo "nvcc stand-in: nothing to write (no -o)" >&2; exit 1; }
{
  echo "#!/bin/sh"
  echo "echo '# nccl-tests stand-in $(basename "$out"): no GPU, nothing is measured'"
  echo "echo '# built by the cuda-nvcc stand-in with: $all'"
} > "$out"
chmod 0755 "$out"
"""

NVCC_POSTINST = """#!/bin/sh
set -e
if [ "$1" = configure ]; then
  update-alternatives --install /usr/local/cuda cuda /usr/local/cuda-@RELEASE@ @PRIORITY@
fi
"""

NVCC_PRERM = """#!/bin/sh
set -e
if [ "$1" = remove ]; then
  update-alternatives --remove cuda /usr/local/cuda-@RELEASE@
fi
"""

TESTS_MAKEFILE = """# Stand-in of NVIDIA nccl-tests' build (vfleet molecule test of the nccl role):
# the real Makefile's variables and targets over placeholder sources; the cuda-nvcc
# stand-in turns each test into a script. Nothing here talks to a GPU.
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
NCCL_HOME ?= /usr
MPI ?= 0
BUILDDIR ?= build
NVCC_GENCODE ?= -gencode=arch=compute_90,code=sm_90
TESTS := all_reduce all_gather broadcast reduce_scatter reduce alltoall scatter gather \\
         sendrecv hypercube
ifeq ($(MPI), 1)
MPIFLAGS := -DMPI_SUPPORT -I$(MPI_HOME)/include -L$(MPI_HOME)/lib -lmpi
endif

default: src.build

src.build: $(TESTS:%=$(BUILDDIR)/%_perf)

$(BUILDDIR)/%_perf: src/%.cu src/common.cu
\t@mkdir -p $(BUILDDIR)
\t$(NVCC) $(NVCC_GENCODE) -o $@ $^ -I$(NCCL_HOME)/include -L$(NCCL_HOME)/lib -lnccl $(MPIFLAGS)

clean:
\trm -rf $(BUILDDIR)

.PHONY: default src.build clean
"""

TESTS = [
    "all_reduce",
    "all_gather",
    "broadcast",
    "reduce_scatter",
    "reduce",
    "alltoall",
    "scatter",
    "gather",
    "sendrecv",
    "hypercube",
]


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
    """One nccl stand-in .deb (standin_apt.build_deb with this role's note)."""
    package = Package(name, version, NOTE, dict(files), "libs", depends, conflicts)
    package.scripts, package.arch = dict(scripts or {}), arch
    standin_apt.build_deb(pool, package)


def nccl_set(pool: Path, version: str) -> None:
    major, minor, patch = re.match(r"(\d+)\.(\d+)\.(\d+)-", version).groups()  # type: ignore[union-attr]
    build_deb(pool, "libnccl2", version, {})
    header = (
        "/* vfleet stand-in of nccl.h: version macros only, no API. */\n"
        f"#define NCCL_MAJOR {major}\n#define NCCL_MINOR {minor}\n#define NCCL_PATCH {patch}\n"
        f"#define NCCL_VERSION_CODE {int(major) * 10000 + int(minor) * 100 + int(patch)}\n"
    )
    build_deb(
        pool,
        "libnccl-dev",
        version,
        {"/usr/include/nccl.h": (header, 0o644)},
        depends=f"libnccl2 (= {version})",
    )


def nvcc_package(pool: Path, version: str) -> None:
    upstream = version.split("-")[0]  # 13.0.88
    release = ".".join(upstream.split(".")[:2])  # 13.0
    series = release.replace(".", "-")  # 13-0

    def sub(text: str) -> str:
        return (
            text.replace("@VERSION@", upstream)
            .replace("@RELEASE@", release)
            .replace("@SERIES@", series)
            .replace("@PRIORITY@", series.replace("-", ""))
        )

    build_deb(
        pool,
        f"cuda-nvcc-{series}",
        version,
        {f"/usr/local/cuda-{release}/bin/nvcc": (sub(NVCC), 0o755)},
        scripts={"postinst": sub(NVCC_POSTINST), "prerm": sub(NVCC_PRERM)},
    )


def tests_archive(out: Path, version: str) -> None:
    top = f"nccl-tests-{version}"
    files = {
        "Makefile": TESTS_MAKEFILE,
        "README.md": f"# nccl-tests {version} (vfleet stand-in)\n\n{NOTE}\n",
        "src/common.cu": "// vfleet stand-in source\n",
    }
    for test in TESTS:
        files[f"src/{test}.cu"] = f"// vfleet stand-in source of {test}_perf\n"
    with tarfile.open(out / f"{top}.tar.gz", "w:gz") as tar:
        for rel, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--nccl", action="append", required=True, metavar="VERSION")
    parser.add_argument("--nvcc", required=True, metavar="VERSION")
    parser.add_argument("--tests", required=True, metavar="VERSION")
    parser.add_argument("--add", action="append", default=[], type=Path, metavar="DEB")
    args = parser.parse_args()
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    for version in args.nccl:
        nccl_set(args.out, version)
    nvcc_package(args.out, args.nvcc)
    tests_archive(args.out, args.tests)
    for deb in args.add:
        shutil.copy(deb, args.out / deb.name)
    standin_apt.index_and_sign(args.out)
    args.out.chmod(0o755)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

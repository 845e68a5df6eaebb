"""The vLLM releases the registry records and what is known about each by hand: which need
extra packages or import shims to start on the pinned CPU environment, and the ways a CPU
capture can differ from a CUDA host's."""

from __future__ import annotations

import re

# The releases whose flag boundaries docs/references.md states exactly.
RELEASES: tuple[str, ...] = (
    "0.8.5.post1",
    "0.9.2",
    "0.10.1.1",
    "0.10.2",
    "0.11.0",
    "0.11.1",
    "0.11.2",
    "0.12.0",
    "0.13.0",
    "0.15.1",
    "0.17.1",
    "0.18.1",
    "0.19.1",
    "0.20.0",
    "0.20.2",
    "0.21.0",
    "0.25.1",
    "0.30.0",
    "0.32.0",
    "0.33.0",
)

# The releases that have `--help=all` (docs/references.md); older ones print all on --help.
HELP_ALL_FROM = (0, 11, 0)

# Packages the upstream wheels import on the help path but the pinned CPU environment lacks,
# each installed (latest, --no-deps) into its own --target dir: orjson and nvtx, which an
# upstream wheel's CLI needs beside a CPU environment (docs/references.md); gguf (needed by
# 0.8.5 and 0.12-0.21) and diskcache (0.10-0.11) are Requires-Dist of those releases that
# their CLI imports at start-up. VERSION_EXTRAS adds per-release ones.
BASE_EXTRAS: tuple[str, ...] = ("orjson", "nvtx", "gguf", "diskcache")
VERSION_EXTRAS: dict[str, tuple[str, ...]] = {}

# Which import shims (site_shims.SHIMS) each release needs on the pinned CPU environment.
VERSION_SHIMS: dict[str, tuple[str, ...]] = {
    "0.8.5.post1": ("torch_compile_noop",),
    "0.9.2": ("transformers_register_exist_ok",),
    "0.17.1": ("torch_cpu_avx512_probe",),
}

# Known ways a capture (its parser and help text) can differ from a CUDA host's for the same
# release, found by reading the release's source: (first, last release affected, note).
CAVEATS: tuple[tuple[tuple[int, ...], tuple[int, ...], str], ...] = (
    (
        (0, 8, 5, 1),
        (0, 8, 5, 1),
        "--guided-decoding-backend: 0.8.5's get_kwargs takes one Literal out of a set "
        "{V0 backends, V1 backends}, so each process (on any platform) offers either "
        "{auto,guidance,xgrammar} or {auto,guidance,lm-format-enforcer,outlines,xgrammar}; "
        "the saved text shows one run's pick. Only {auto,guidance,xgrammar} is always accepted.",
    ),
    (
        (0, 30, 0),
        (0, 33, 0),
        "--mm-processor-device: choices are auto, cpu plus the platform's device type, so a "
        "CUDA host also accepts 'cuda' (the CPU capture lists {auto,cpu}).",
    ),
)


def version_key(version: str) -> tuple[int, ...]:
    """Numeric sort key; a ".postN" suffix sorts after its base release."""
    parts: list[int] = []
    for piece in version.split("."):
        m = re.match(r"(\d+)|post(\d+)", piece)
        if m is None:
            raise ValueError(f"unsupported version {version!r}")
        parts.append(int(m.group(1) or m.group(2)))
    return tuple(parts)

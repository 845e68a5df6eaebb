"""The host around the GPUs: CPU and NUMA layout (`lscpu`, `numactl -H`), memory
(/proc/meminfo), and the options the installed vLLM accepts (`vllm serve --help=all`), so the
plan only passes flags this vLLM knows.
"""

from __future__ import annotations

import re
from typing import Any

from vfleet.probe.text_numbers import int_or_none

_VLLM_FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*")


def parse_lscpu(text: str) -> dict[str, Any]:
    raw = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            raw[key.strip()] = value.strip()
    numa_cpus = {}
    for key, value in raw.items():
        match = re.fullmatch(r"NUMA node(\d+) CPU\(s\)", key)
        if match and value:
            numa_cpus[match.group(1)] = value
    return {
        "architecture": raw.get("Architecture"),
        "model": raw.get("Model name"),
        "sockets": int_or_none(raw.get("Socket(s)")),
        "cores_per_socket": int_or_none(raw.get("Core(s) per socket")),
        "threads_per_core": int_or_none(raw.get("Thread(s) per core")),
        "cpus": int_or_none(raw.get("CPU(s)")),
        "numa_nodes": int_or_none(raw.get("NUMA node(s)")),
        "numa_cpus": numa_cpus,
    }


def parse_numactl(text: str) -> dict[str, int]:
    """`numactl -H`: memory per NUMA node in MiB."""
    sizes = {}
    for line in text.splitlines():
        match = re.match(r"^node (\d+) size: (\d+) MB", line.strip())
        if match:
            sizes[match.group(1)] = int(match.group(2))
    return sizes


def parse_meminfo_mib(text: str | None) -> int | None:
    match = re.search(r"^MemTotal:\s+(\d+) kB", text or "", re.MULTILINE)
    return int(match.group(1)) // 1024 if match else None


def parse_vllm_flags(help_text: str) -> list[str]:
    """The long options `vllm serve --help=all` defines (not the ones its prose mentions);
    only the lowercase dashed form vLLM uses, which is what the facts model accepts."""
    flags: set[str] = set()
    for line in help_text.splitlines():
        if not re.match(r"^\s{2,}-", line):
            continue
        spec = re.split(r"\s{2,}", line.strip())[0]
        found = re.findall(r"(?<![\w-])--[A-Za-z0-9][A-Za-z0-9._-]*", spec)
        flags.update(f for f in found if _VLLM_FLAG.fullmatch(f))
    return sorted(flags)

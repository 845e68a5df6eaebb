"""GPU catalog: memory as the driver reports it (what vLLM budgets), plus the specs the
planner needs. Data and sources live in data/gpus.json."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from vfleet.errors import UserError

GPUS_FILE = Path(__file__).parent / "data" / "gpus.json"
GIB = 1 << 30


@dataclass(frozen=True)
class Gpu:
    name: str
    aliases: tuple[str, ...]
    memory_bytes: int
    arch: str
    form_factor: str
    fp8: bool
    nvlink_gb_s: float
    bf16_dense_tflops: float
    fp8_dense_tflops: float
    hbm_tb_s: float
    fp4_dense_tflops: float = 0.0

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB

    @property
    def nvswitch_class(self) -> bool:
        """SXM/superchip parts sit on NVSwitch baseboards where NCCL uses NVLink SHARP."""
        return self.form_factor in ("sxm", "superchip") and self.nvlink_gb_s > 0

    def with_memory_gib(self, gib: float) -> Gpu:
        return Gpu(**{**self.__dict__, "memory_bytes": int(gib * GIB)})


@cache
def catalog() -> tuple[Gpu, ...]:
    raw = json.loads(GPUS_FILE.read_text())["gpus"]
    return tuple(
        Gpu(
            name=g["name"],
            aliases=tuple(g.get("aliases") or ()),
            memory_bytes=int(g["memory_bytes"]),
            arch=str(g.get("arch") or "unknown"),
            form_factor=str(g.get("form_factor") or "pcie"),
            fp8=bool(g.get("fp8")),
            nvlink_gb_s=float(g.get("nvlink_gb_s") or 0),
            bf16_dense_tflops=float(g.get("bf16_dense_tflops") or 0),
            fp8_dense_tflops=float(g.get("fp8_dense_tflops") or 0),
            hbm_tb_s=float(g.get("hbm_tb_s") or 0),
            fp4_dense_tflops=float(g.get("fp4_dense_tflops") or 0),
        )
        for g in raw
    )


def _key(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def resolve_gpu(name: str) -> Gpu:
    """Match a catalog name or the name nvidia-smi prints, ignoring case and punctuation."""
    wanted = _key(name)
    for gpu in catalog():
        if wanted in {_key(gpu.name), *(_key(a) for a in gpu.aliases)}:
            return gpu
    names = [g.name for g in catalog()]
    close = difflib.get_close_matches(
        name, names + [a for g in catalog() for a in g.aliases], n=3, cutoff=0.5
    )
    hint = f" (close: {', '.join(close)})" if close else ""
    raise UserError(
        f"unknown GPU {name!r}{hint}: use a catalog name from `vfleet gpus` or the exact name "
        "nvidia-smi prints, or pass --gpu-memory-gib with the closest one"
    )

"""The cost model's fitted parameters: kernel efficiencies per GPU generation, software
overheads per engine generation, all fitted to measured serving runs.

`data/perf_fit.json` is written by `python controller/tools/refit.py` from the measured
development set (`data/perf_cases/measured.json`); a cluster's own calibration
(`artifacts/<env>/calibration.json`) may override it. A GPU generation without fitted data
borrows the nearest fitted one and says so (`PerfParams.borrowed_from`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from functools import cache
from typing import Any

from vfleet.catalog.releases import parse_version
from vfleet.data import DATA_DIR
from vfleet.errors import UserError
from vfleet.perf.kernels import kernel_table

FIT_FILE = DATA_DIR / "perf_fit.json"


@dataclass(frozen=True)
class Efficiency:
    """What a GPU generation's kernels reach, as fractions of the datasheet peak."""

    gemm: float = 0.6
    """Dense GEMMs (attention projections, dense MLPs, shared experts, LM head)."""
    moe_gemm: float = 0.3
    """vLLM's grouped expert GEMMs (fused MoE)."""
    moe_narrow_cols: float = 128.0
    """Expert width per GPU (columns) at which a TP-sliced grouped GEMM runs at half speed."""
    hbm: float = 0.75
    """Weight streaming."""
    kv_read: float = 0.6
    """Paged-attention KV streaming in decode."""
    attention: float = 0.4
    """Attention FLOPs (prefill, and MLA decode)."""
    a2a: float = 0.5
    """Fraction of the link's bandwidth the MoE dispatch and combine reach."""
    ep_imbalance: float = 1.1
    """The busiest expert rank's load over the mean, without EPLB (not fitted)."""


@dataclass(frozen=True)
class Overheads:
    """What one engine generation spends outside the GPU's kernels."""

    step_s: float = 2e-3
    """CPU per step: scheduler, input preparation, sampler, detokenizer hand-off."""
    seq_s: float = 10e-6
    """CPU per scheduled sequence per step."""
    request_s: float = 0.5e-3
    """CPU per request as it starts (input processing, block tables, sampling set-up)."""
    eager_kernel_s: float = 4e-6
    """Extra per kernel in a step without full CUDA graphs (mixed prefill steps)."""
    graph_kernel_s: float = 4e-6
    """Per kernel, the floor of a small kernel replayed from a CUDA graph
    (`vfleet.perf.model.kernels_per_step`)."""


# What the serving runs fit: the kernel efficiencies are measured (vfleet.perf.kernels), the
# MoE dispatch's share of the link is not (it depends on the backend and the fabric).
FITTED_EFFICIENCY = ("a2a",)
FITTED_OVERHEADS = ("step_s", "seq_s", "request_s", "eager_kernel_s", "graph_kernel_s")
# Engine generations whose overheads differ: V0 before the 0.6 CPU-overhead work, V0 0.6-0.7,
# and the V1 engine (0.8+). Async scheduling (on by default from 0.14) hides the CPU work.
ENGINE_GENERATIONS = ("v0", "v0.6", "v1")


def engine_generation(version: tuple[int, int, int]) -> str:
    if version < (0, 6, 0):
        return "v0"
    if version < (0, 8, 0):
        return "v0.6"
    return "v1"


def async_scheduling_default(version: tuple[int, int, int]) -> bool:
    return version >= (0, 14, 0)


@dataclass(frozen=True)
class PerfParams:
    """The parameters for one GPU generation on one vLLM release."""

    efficiency: Efficiency
    overheads: Overheads
    async_scheduling: bool
    gpu_generation: str
    engine_generation: str
    borrowed_from: str = ""  # the fitted generation used when this one has no data
    source: str = "fit"

    def describe(self) -> dict[str, Any]:
        return {
            "gpu_generation": self.gpu_generation,
            "borrowed_from": self.borrowed_from or None,
            "engine_generation": self.engine_generation,
            "async_scheduling": self.async_scheduling,
            "source": self.source,
            "efficiency": asdict(self.efficiency),
            "overheads": asdict(self.overheads),
        }


@dataclass(frozen=True)
class Fit:
    """The whole fitted table: efficiencies per GPU generation, overheads per engine."""

    efficiency: dict[str, Efficiency]
    overheads: dict[str, Overheads]
    source: str = "fit"

    def params(self, arch: str, version: str | tuple[int, int, int] | None) -> PerfParams:
        v = version if isinstance(version, tuple) else parse_version(version)
        gen = engine_generation(v)
        borrowed = ""
        if arch in self.efficiency:
            eff = self.efficiency[arch]
        else:
            borrowed = "hopper" if "hopper" in self.efficiency else next(iter(self.efficiency))
            eff = self.efficiency[borrowed]
        return PerfParams(
            efficiency=eff,
            overheads=self.overheads.get(gen, Overheads()),
            async_scheduling=async_scheduling_default(v),
            gpu_generation=arch,
            engine_generation=gen,
            borrowed_from=borrowed,
            source=self.source,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "efficiency": {k: asdict(v) for k, v in self.efficiency.items()},
            "overheads": {k: asdict(v) for k, v in self.overheads.items()},
        }


def _build(cls: type, raw: Any, where: str) -> Any:
    if not isinstance(raw, dict):
        raise UserError(f"{where} must be a mapping of {cls.__name__} fields")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise UserError(
            f"{where}: unknown field {unknown[0]!r} (known: {', '.join(sorted(known))})"
        )
    values = {}
    for key, value in raw.items():
        if not isinstance(value, int | float) or not (0 < float(value) < 1e6):
            raise UserError(f"{where}.{key} must be a positive number, got {value!r}")
        values[key] = float(value)
    return cls(**values)


def fit_from_dict(raw: Any, source: str) -> Fit:
    if not isinstance(raw, dict) or "efficiency" not in raw or "overheads" not in raw:
        raise UserError(f"{source}: expected keys 'efficiency' and 'overheads'")
    eff = {
        k: _build(Efficiency, v, f"{source}: efficiency.{k}") for k, v in raw["efficiency"].items()
    }
    over = {
        k: _build(Overheads, v, f"{source}: overheads.{k}") for k, v in raw["overheads"].items()
    }
    if not eff:
        raise UserError(f"{source}: efficiency names no GPU generation")
    return Fit(efficiency=eff, overheads=over, source=source)


@cache
def default_fit() -> Fit:
    """The bundled fit, with the efficiencies the kernel tables measure set from them."""
    fit = fit_from_dict(json.loads(FIT_FILE.read_text())["fit"], "fit")
    return with_measured(fit)


def with_measured(fit: Fit) -> Fit:
    """`fit` with each generation's measured kernel efficiencies laid over its own."""
    eff = dict(fit.efficiency)
    for arch, values in eff.items():
        table = kernel_table(arch)
        if table is not None:
            eff[arch] = replace(values, **table.measured_levels())
    return Fit(efficiency=eff, overheads=fit.overheads, source=fit.source)


def load_fit(calibration: Fit | None = None) -> Fit:
    """The bundled fit, with a cluster calibration's values laid over it when given (read
    and checked by vfleet.calibrate.calibration.load, the only reader of such a file)."""
    base = default_fit()
    if calibration is None:
        return base
    return Fit(
        efficiency={**base.efficiency, **calibration.efficiency},
        overheads={**base.overheads, **calibration.overheads},
        source=calibration.source,
    )


def with_values(fit: Fit, vector: dict[str, float]) -> Fit:
    """A copy of `fit` with 'efficiency/hopper/gemm'-style keys set (for the fitter)."""
    eff, over = dict(fit.efficiency), dict(fit.overheads)
    for key, value in vector.items():
        table, group, name = key.split("/")
        if table == "efficiency":
            eff[group] = replace(eff.get(group, Efficiency()), **{name: value})
        else:
            over[group] = replace(over.get(group, Overheads()), **{name: value})
    return Fit(efficiency=eff, overheads=over, source=fit.source)

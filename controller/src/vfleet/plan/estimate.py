"""`vfleet estimate`: one layout at one operating point, as `vllm bench serve` would see it.

The budget engine sizes the KV cache and resolves the release's scheduler defaults; the
scheduler replay (`vfleet.perf.simulate`) runs the benchmark's requests through one engine rank;
the step cost model (`vfleet.perf.model`, fitted parameters from `vfleet.perf.fit`) turns each
step into seconds. Engines (replicas x DP ranks) are symmetric: the client's requests and
concurrency split evenly over them, and DP ranks of an MoE model step together, their
tokens meeting in the expert layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vfleet.budget.compute import Budget, BudgetRequest, compute, fits
from vfleet.budget.speculative import Speculative
from vfleet.catalog.model_shape import ModelShape
from vfleet.catalog.releases import VersionTraits, mla_forces_whole_prompts
from vfleet.errors import UserError
from vfleet.perf import bands
from vfleet.perf import model as perf
from vfleet.perf.fit import Fit, PerfParams, default_fit
from vfleet.perf.simulate import Client, EngineLimits, replay
from vfleet.perf.trajectory import Trajectory
from vfleet.plan import shape
from vfleet.plan.candidate import Candidate
from vfleet.plan.rules import reject_reason
from vfleet.topology.cluster import Cluster

DATASETS = ("random", "sharegpt")
# ShareGPT as `vllm bench serve` samples it: prompts up to 1,024 tokens, prompt plus
# completion up to 2,048, at least 4 of each. Lengths are close to log-normal; these spreads
# (sigma of log length) reproduce its heavy completion tail.
SHAREGPT_SIGMA_IN, SHAREGPT_SIGMA_OUT = 0.9, 1.0
SHAREGPT_MAX_IN, SHAREGPT_MAX_TOTAL = 1024, 2048


@dataclass(frozen=True)
class EstimateRequest:
    spec: ModelShape
    cluster: Cluster
    layout: Candidate
    traits: VersionTraits
    input_len: int
    output_len: int
    concurrency: int | None  # None: every prompt at once (request rate inf)
    num_prompts: int | None = None
    request_rate: float | None = None  # requests/s for the whole cluster
    dataset: str = "random"
    replicas: int | None = None  # default: as many as the cluster holds
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    enable_chunked_prefill: bool | None = None
    num_scheduler_steps: int = 1  # V0 multi-step scheduling (0.6-0.7) spreads CPU work
    all2all_backend: str | None = None  # default: the release's (allgather_reducescatter)
    fit: Fit = field(default_factory=default_fit)
    # Memory only: the draft's weights and KV shrink the cache; drafting is not priced.
    speculative: Speculative | None = None


@dataclass
class Estimate:
    request: EstimateRequest
    budget: Budget
    params: PerfParams
    engines: int
    active_engines: int
    replicas: int
    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool
    kv_cap_seqs: int
    output_tokens_per_s: float
    request_throughput: float
    ttft_ms: dict[str, float]
    tpot_ms: dict[str, float]
    running_seqs: float
    preemptions: int
    breakdown_ms: dict[str, float]
    plan_would_reject: str
    steps: int
    band: bands.Band

    @property
    def throughput_interval(self) -> bands.Interval:
        return bands.throughput_interval(self.output_tokens_per_s, self.band)

    @property
    def gpus(self) -> int:
        return self.request.layout.gpus * self.replicas

    def to_json(self) -> dict[str, Any]:
        r = self.request
        out = {
            "model": r.spec.name,
            "gpu": r.cluster.gpu.name,
            "vllm_version": r.traits.label,
            "layout": r.layout.label,
            "replicas": self.replicas,
            "gpus": self.gpus,
            "engines": self.engines,
            "workload": {
                "dataset": r.dataset,
                "input_len": r.input_len,
                "output_len": r.output_len,
                "concurrency": r.concurrency,
                "num_prompts": _num_prompts(r),
                "request_rate": r.request_rate,
            },
            "scheduler": {
                "max_num_seqs": self.max_num_seqs,
                "max_num_batched_tokens": self.max_num_batched_tokens,
                "enable_chunked_prefill": self.chunked_prefill,
                "kv_cache_dtype": self.budget.kv_cache_dtype,
                "kv_tokens_per_engine": self.budget.kv_tokens,
                "kv_cap_seqs": self.kv_cap_seqs,
            },
            # p10-p90: where held-out measured runs of this regime fell around the estimate.
            "output_tokens_per_s": self.throughput_interval.to_json(),
            "output_tokens_per_s_per_gpu": round(self.output_tokens_per_s / self.gpus, 1),
            "request_throughput": round(self.request_throughput, 3),
            "ttft_ms": self.ttft_ms,
            "tpot_ms": self.tpot_ms,
            "ttft_median_ms": bands.latency_interval(self.ttft_ms["median"], self.band).to_json(),
            "tpot_median_ms": bands.latency_interval(self.tpot_ms["median"], self.band).to_json(2),
            "interval": {
                "regime": self.band.regime,
                "held_out_runs": self.band.points,
                "p10_ratio": self.band.low,
                "p90_ratio": self.band.high,
            },
            "running_seqs": round(self.running_seqs, 1),
            "preemptions": self.preemptions,
            "step_breakdown_ms": self.breakdown_ms,
            "plan_would_reject": self.plan_would_reject or None,
            "parameters": self.params.describe(),
        }
        if self.budget.speculative:
            out["speculative"] = self.budget.speculative
        return out


def _num_prompts(r: EstimateRequest) -> int:
    if r.num_prompts:
        return r.num_prompts
    # vllm bench serve's habit: enough prompts for ten rounds of the concurrency.
    return max(10 * (r.concurrency or 100), 100)


def request_lengths(
    dataset: str, n: int, input_len: int, output_len: int
) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and completion lengths of n requests, deterministic for a given shape."""
    if dataset == "random":
        return np.full(n, input_len, np.int64), np.full(n, output_len, np.int64)
    if dataset != "sharegpt":
        raise UserError(f"dataset {dataset!r}: use one of {', '.join(DATASETS)}")
    q = (np.arange(n) + 0.5) / n
    rng = np.random.default_rng(0)
    from statistics import NormalDist

    z = np.array([NormalDist().inv_cdf(float(x)) for x in q])
    z_in, z_out = rng.permutation(z), rng.permutation(z)
    prompts = _lognormal(z_in, input_len, SHAREGPT_SIGMA_IN, 4, SHAREGPT_MAX_IN)
    outputs = _lognormal(z_out, output_len, SHAREGPT_SIGMA_OUT, 4, SHAREGPT_MAX_TOTAL - prompts)
    return prompts, outputs


def _lognormal(z: np.ndarray, mean: float, sigma: float, low: float, high: Any) -> np.ndarray:
    """Clipped log-normal lengths whose mean is `mean` (the location found by bisection)."""
    lo, hi = math.log(max(low, 1)) - 5, math.log(max(mean, 1)) + 5
    for _ in range(50):
        mid = (lo + hi) / 2
        values = np.clip(np.exp(mid + sigma * z), low, high)
        lo, hi = (mid, hi) if values.mean() < mean else (lo, mid)
    return np.clip(np.rint(np.exp(lo + sigma * z)), low, high).astype(np.int64)


def budget_for(req: EstimateRequest) -> Budget:
    c = req.layout
    budget = compute(
        BudgetRequest(
            spec=req.spec,
            gpu=req.cluster.gpu,
            traits=req.traits,
            layout=c.layout(),
            gpu_memory_utilization=req.gpu_memory_utilization,
            max_model_len=req.max_model_len or req.spec.max_position_embeddings,
            max_num_batched_tokens=req.max_num_batched_tokens,
            max_num_seqs=req.max_num_seqs,
            kv_cache_dtype=req.kv_cache_dtype or "auto",
            quantization=req.quantization,
            mean_context_len=req.input_len + req.output_len // 2,
            speculative=req.speculative,
        )
    )
    if not fits(budget):
        raise UserError(
            f"layout {c.label} does not fit {req.spec.name} on {req.cluster.gpu.name}: "
            f"{budget.weights_gib:.0f} GiB of weights per GPU leave "
            f"{max(budget.available_kv_gib, 0):.1f} GiB for KV; use more GPUs per engine"
        )
    return budget


def step_seconds(
    spec: ModelShape,
    req: EstimateRequest,
    e: perf.EngineShape,
    params: PerfParams,
    traj: Trajectory,
    active_dp: int,
) -> tuple[np.ndarray, perf.StepCost]:
    """Each replayed step's duration. With PP, one step is a round of pp micro-batches."""
    pp = e.pp
    cost = perf.step_cost(
        spec,
        req.cluster.gpu,
        e,
        params,
        decode=traj.decode / pp,
        decode_context=traj.decode_context / pp,
        prefill=traj.prefill / pp,
        prefill_pairs=traj.prefill_pairs / pp,
        seqs=traj.seqs / pp,
        new_requests=traj.new_requests / pp,
        active_dp=active_dp,
        cpu_scale=1 / req.num_scheduler_steps,
    )
    return perf.pipeline_step_s(cost, pp), cost


def replay_kv_tokens(req: EstimateRequest, budget: Budget) -> int:
    """The KV tokens the replay may fill with this run's requests.

    The engine's figure counts tokens per cache group. A request fills every group of a
    model with full attention alike, but a sliding-window group holds only the window: on a
    hybrid model (gpt-oss, Gemma) long requests take less of the shared block pool than that
    figure says, so as many fit as the pool's blocks over one request's blocks.
    """
    tokens = budget.kv_tokens * req.layout.dcp
    if req.layout.dcp > 1 or budget.blocks_per_mean_request <= 0:
        return tokens
    fits = budget.num_blocks / budget.blocks_per_mean_request * budget.mean_context_len
    return max(tokens, int(fits))


def scheduler_limits(req: EstimateRequest, budget: Budget) -> EngineLimits:
    chunked = req.enable_chunked_prefill
    batched = budget.max_num_batched_tokens
    if req.spec.is_mla and mla_forces_whole_prompts(req.traits.version):
        # Forced off whatever was asked (vfleet.catalog.releases), and a step then takes
        # whole prompts up to the context length. The memory profile keeps the release's
        # chunked default: the budget does not charge a whole-context profiling batch.
        chunked, batched = False, max(batched, budget.max_model_len)
    elif chunked is None:
        # V0 turned chunked prefill on only past 32K of context; V1 always schedules chunks.
        chunked = not req.traits.v0_engine or budget.max_model_len > 32768
    return EngineLimits(
        max_num_seqs=budget.max_num_seqs,
        max_num_batched_tokens=batched,
        kv_tokens=replay_kv_tokens(req, budget),
        block_size=budget.block_size,
        chunked_prefill=chunked,
    )


@dataclass
class Prepared:
    """Everything about a run that does not depend on the cost model's parameters."""

    request: EstimateRequest
    budget: Budget
    limits: EngineLimits
    shape: perf.EngineShape
    engines: int
    active: int
    active_dp: int
    replicas: int
    inputs: np.ndarray
    outputs: np.ndarray
    concurrency: int | None
    rate: float | None
    trajectory: Trajectory | None  # None for timed (request-rate) runs: replayed per fit


def prepare(req: EstimateRequest) -> Prepared:
    c = req.layout
    # Placed as the planner places it (Cluster.for_engine).
    cluster = req.cluster.for_engine(c.gpus, shape.heavy_traffic_crosses(req.spec, req.cluster, c))
    if c.gpus > cluster.total_gpus:
        raise UserError(
            f"layout {c.label} needs {c.gpus} GPUs; the cluster has {cluster.total_gpus}"
        )
    replicas = req.replicas or max(cluster.total_gpus // c.gpus, 1)
    if replicas * c.gpus > cluster.total_gpus:
        raise UserError(
            f"{replicas} replicas of {c.label} need {replicas * c.gpus} GPUs; "
            f"the cluster has {cluster.total_gpus}"
        )
    budget = budget_for(req)
    limits = scheduler_limits(req, budget)
    engines = replicas * c.dp
    n = _num_prompts(req)
    active = min(engines, req.concurrency or n, n)
    per_engine_n = math.ceil(n / active)
    per_engine_c = math.ceil(req.concurrency / active) if req.concurrency else None
    inputs, outputs = request_lengths(req.dataset, per_engine_n, req.input_len, req.output_len)
    longest = int((inputs + outputs).max())
    if longest > budget.max_model_len:
        raise UserError(
            f"a request of {longest} tokens exceeds max-model-len {budget.max_model_len}: "
            "raise --max-model-len"
        )
    e = shape.engine_shape(
        req.spec, budget, cluster, c.layout(), req.all2all_backend, version=req.traits.version
    )
    rate = req.request_rate / active if req.request_rate else None
    traj = None
    if not rate:
        try:
            traj = replay(
                inputs, outputs, limits, Client(per_engine_c), v0_scheduler=req.traits.v0_engine
            )
        except ValueError as exc:
            raise UserError(f"layout {c.label}: {exc}; use a larger KV cache") from None
    return Prepared(
        request=req,
        budget=budget,
        limits=limits,
        shape=e,
        engines=engines,
        active=active,
        active_dp=min(c.dp, active),
        replicas=replicas,
        inputs=inputs,
        outputs=outputs,
        concurrency=per_engine_c,
        rate=rate,
        trajectory=traj,
    )


def finish(prep: Prepared, fit: Fit) -> Estimate:
    """Cost a prepared run with one set of parameters."""
    req, c = prep.request, prep.request.layout
    params = fit.params(req.cluster.gpu.arch, req.traits.version)
    if prep.trajectory is None:
        try:
            traj = _timed_replay(prep, params)
        except ValueError as exc:
            raise UserError(f"layout {c.label}: {exc}; use a larger KV cache") from None
        _, cost = step_seconds(req.spec, req, prep.shape, params, traj, prep.active_dp)
        timings = traj.timings()
    else:
        traj = prep.trajectory
        durations, cost = step_seconds(req.spec, req, prep.shape, params, traj, prep.active_dp)
        timings = traj.timings(durations)
    budget = prep.budget
    kv_cap = int(budget.kv_tokens * c.dcp / max(req.input_len + req.output_len, 1))
    return Estimate(
        request=req,
        budget=budget,
        params=params,
        engines=prep.engines,
        active_engines=prep.active,
        replicas=prep.replicas,
        max_num_seqs=prep.limits.max_num_seqs,
        max_num_batched_tokens=prep.limits.max_num_batched_tokens,
        chunked_prefill=prep.limits.chunked_prefill,
        kv_cap_seqs=kv_cap,
        output_tokens_per_s=timings.output_tokens_per_s * prep.active,
        request_throughput=timings.request_throughput * prep.active,
        ttft_ms=_percentiles(timings.ttft_s),
        tpot_ms=_percentiles(timings.tpot_s),
        running_seqs=timings.mean_running,
        preemptions=traj.preemptions,
        breakdown_ms=cost.breakdown_ms(),
        plan_would_reject=reject_reason(req.spec, req.cluster, req.traits, c),
        steps=traj.steps,
        band=bands.band_for(estimate_regime(req)),
    )


def estimate_regime(req: EstimateRequest) -> str:
    """The regime whose held-out errors give this estimate's band (vfleet.perf.bands)."""
    nodes = math.ceil(req.layout.gpus / max(req.cluster.gpus_per_node, 1))
    return bands.regime(req.input_len, req.output_len, nodes)


def estimate(req: EstimateRequest) -> Estimate:
    return finish(prepare(req), req.fit)


def _timed_replay(prep: Prepared, params: PerfParams) -> Trajectory:
    req, e = prep.request, prep.shape
    pp = e.pp

    def step_time(d: float, ctx: float, p: float, pairs: float, seqs: float, new: float) -> float:
        cost = perf.step_cost(
            req.spec,
            req.cluster.gpu,
            e,
            params,
            decode=np.float64(d / pp),
            decode_context=np.float64(ctx / pp),
            prefill=np.float64(p / pp),
            prefill_pairs=np.float64(pairs / pp),
            seqs=np.float64(seqs / pp),
            new_requests=np.float64(new / pp),
            active_dp=prep.active_dp,
            cpu_scale=1 / req.num_scheduler_steps,
        )
        return float(perf.pipeline_step_s(cost, pp))

    return replay(
        prep.inputs,
        prep.outputs,
        prep.limits,
        Client(prep.concurrency, prep.rate),
        step_time=step_time,
        v0_scheduler=req.traits.v0_engine,
    )


def _percentiles(values: np.ndarray) -> dict[str, float]:
    if values.size == 0:
        return {"median": 0.0, "p99": 0.0, "mean": 0.0}
    return {
        "median": round(float(np.median(values)) * 1e3, 2),
        "p99": round(float(np.percentile(values, 99)) * 1e3, 2),
        "mean": round(float(np.mean(values)) * 1e3, 2),
    }

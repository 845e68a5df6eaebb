"""The estimator's steady state: one engine rank holding `running` sequences of fixed mean
lengths under a closed loop, for the planner's search.

It is the limit the scheduler replay (`vfleet.perf.simulate`) settles into with fixed lengths:
each step decodes every running sequence and spends the rest of max-num-batched-tokens on
the prompts of the requests that replace finished ones (chunked prefill). The same step cost
model prices it, with the same fitted parameters, over a whole grid of batch sizes at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vfleet.catalog.gpus import Gpu
from vfleet.catalog.model_shape import ModelShape
from vfleet.perf import model as perf
from vfleet.perf.fit import PerfParams


@dataclass(frozen=True)
class Prediction:
    running_per_rank: int
    tpot_s: float  # mean inter-token time, prefill interleaved at the steady-state rate
    itl_p99_s: float  # a step that also carries a full prefill chunk
    ttft_p99_s: float  # the p99 prompt through chunks of that size, no queueing
    output_tokens_per_s: float  # per engine (all its DP ranks)
    cost: perf.StepCost


@dataclass(frozen=True)
class Grid:
    """Predictions over a grid of batch sizes (arrays aligned with `running`)."""

    running: np.ndarray
    tpot_s: np.ndarray
    itl_p99_s: np.ndarray
    ttft_p99_s: np.ndarray
    output_tokens_per_s: np.ndarray
    cost: perf.StepCost

    def row(self, k: int) -> Grid:
        """One max-num-batched-tokens row of an (m, n) table."""

        def pick(value: Any) -> Any:
            arr = np.asarray(value)
            if arr.ndim == 2:
                return arr[k]
            return np.broadcast_to(arr, self.running.shape) if arr.ndim else value

        cost = perf.StepCost(**{k2: pick(v) for k2, v in self.cost.__dict__.items()})
        return Grid(
            self.running,
            pick(self.tpot_s),
            pick(self.itl_p99_s),
            pick(self.ttft_p99_s),
            pick(self.output_tokens_per_s),
            cost,
        )

    def at(self, i: int) -> Prediction:
        def pick(value: Any) -> Any:
            return value[i] if isinstance(value, np.ndarray) and value.ndim else value

        cost = perf.StepCost(**{k: pick(v) for k, v in self.cost.__dict__.items()})
        return Prediction(
            running_per_rank=int(self.running[i]),
            tpot_s=float(self.tpot_s[i]),
            itl_p99_s=float(self.itl_p99_s[i]),
            ttft_p99_s=float(self.ttft_p99_s[i]),
            output_tokens_per_s=float(self.output_tokens_per_s[i]),
            cost=cost,
        )


def predict_grid(
    spec: ModelShape,
    gpu: Gpu,
    e: perf.EngineShape,
    params: PerfParams,
    running: np.ndarray,
    input_mean: float,
    output_mean: float,
    input_p99: float,
    max_num_batched_tokens: Any,
) -> Grid:
    """Steady state of one engine with `running` sequences per DP rank (an array). With an
    array of max-num-batched-tokens shaped (m, 1), every result is an (m, n) table."""
    r = np.asarray(running, dtype=float)
    pp = e.pp
    # Requests finish at r / output_mean per step and their replacements' prompts arrive
    # with them. A step holds max-num-batched-tokens, so at most
    # mnbt x output / (input + output) sequences can decode while their successors prefill;
    # past that the extra requests only wait in the queue (longer TTFT, no more tokens).
    sustainable = max_num_batched_tokens * output_mean / max(input_mean + output_mean, 1.0)
    decoding = np.minimum(r, np.maximum(sustainable, 1.0))
    prefill = decoding * input_mean / max(output_mean, 1.0)
    room = np.maximum(max_num_batched_tokens - decoding, 1.0)
    context = input_mean + output_mean / 2
    new = prefill / max(input_mean, 1.0)

    def cost(extra_prefill: Any, starting: Any) -> perf.StepCost:
        return perf.step_cost(
            spec,
            gpu,
            e,
            params,
            decode=decoding / pp,
            decode_context=decoding * context / pp,
            prefill=extra_prefill / pp,
            prefill_pairs=extra_prefill * (input_mean / 2) / pp,
            seqs=(decoding + starting) / pp,
            new_requests=starting / pp,
        )

    # Prompts arrive in bursts, not spread over every step: a step that carries one runs
    # without full CUDA graphs, the others replay them. `mixed` is the share of such steps.
    mixed = np.minimum(1.0, new * np.ceil(input_mean / room))
    share = np.maximum(mixed, 1e-9)
    with_prefill = cost(prefill / share, new / share)
    decode_only = cost(0.0 * prefill, 0.0 * new)
    steady = _blend(with_prefill, decode_only, mixed)
    tpot = perf.pipeline_step_s(steady, pp)
    # A token that meets a full chunk waits one such step, then pp - 1 ordinary ones.
    chunk = room
    worst = cost(chunk, chunk / max(input_mean, 1.0))
    itl_p99 = worst.step_s + (pp - 1) * (steady.step_s + worst.pp_s)
    ttft = np.ceil(input_p99 / chunk) * itl_p99
    throughput = decoding * e.dp / np.maximum(tpot, 1e-12)
    return Grid(r, tpot, itl_p99, ttft, throughput, steady)


def _blend(a: perf.StepCost, b: perf.StepCost, share: Any) -> perf.StepCost:
    """The mean step when a `share` of steps cost `a` and the rest `b`."""
    return perf.StepCost(
        **{k: share * v + (1 - share) * b.__dict__[k] for k, v in a.__dict__.items()}
    )

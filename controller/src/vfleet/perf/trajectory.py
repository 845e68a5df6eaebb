"""What a scheduler replay produced (vfleet.perf.simulate): each step's load, each
request's arrival, first token and finish, and the `vllm bench serve` numbers they make
once each step has a duration."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Trajectory:
    """What each step carried, and when each request arrived, started and finished."""

    decode: np.ndarray
    decode_context: np.ndarray
    prefill: np.ndarray
    prefill_pairs: np.ndarray
    seqs: np.ndarray
    new_requests: np.ndarray  # requests whose first prompt chunk is in the step
    running: np.ndarray  # sequences holding KV during the step
    arrival_step: np.ndarray  # the step before which each request arrived
    first_step: np.ndarray  # the step that produced its first token
    finish_step: np.ndarray
    output_len: np.ndarray
    preemptions: int
    step_end_s: np.ndarray | None = None  # set when the replay ran on a clock
    arrival_s: np.ndarray | None = None

    @property
    def steps(self) -> int:
        return int(self.decode.size)

    def timings(self, step_s: np.ndarray | None = None) -> RunTimings:
        """Turn step durations into the numbers `vllm bench serve` prints."""
        if step_s is not None:
            durations = np.asarray(step_s, dtype=float) * np.ones(self.steps)
            end = np.cumsum(durations)
        elif self.step_end_s is not None:
            end = self.step_end_s
            durations = np.diff(end, prepend=0.0)
        else:
            raise ValueError("a replay without a clock needs step durations")
        start = end - durations
        if self.arrival_s is not None:
            arrived = self.arrival_s
        else:
            arrived = start[np.minimum(self.arrival_step, self.steps - 1)]
        first = end[self.first_step]
        finish = end[self.finish_step]
        ttft = first - arrived
        out = self.output_len
        tpot = np.where(out > 1, (finish - first) / np.maximum(out - 1, 1), np.nan)
        duration = float(finish.max() - min(float(arrived.min()), 0.0))
        busy = np.maximum(durations, 1e-12)
        return RunTimings(
            duration_s=duration,
            output_tokens=int(out.sum()),
            requests=int(out.size),
            ttft_s=ttft,
            tpot_s=tpot[~np.isnan(tpot)],
            mean_running=float(np.sum(self.running * busy) / np.sum(busy)),
            mean_step_s=float(np.mean(durations)),
        )


@dataclass(frozen=True)
class RunTimings:
    duration_s: float
    output_tokens: int
    requests: int
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    mean_running: float
    mean_step_s: float

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def request_throughput(self) -> float:
        return self.requests / self.duration_s if self.duration_s > 0 else 0.0

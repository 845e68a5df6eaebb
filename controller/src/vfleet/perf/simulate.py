"""A step-by-step replay of vLLM's scheduler for one engine rank under a benchmark client.

The client is `vllm bench serve`'s: N prompts, sent all at once (request rate inf), through
a closed loop of C concurrent requests (`--max-concurrency`), or at a fixed request rate.
The engine schedules as its release does:

- V1 (0.8+): every step, running sequences decode first, then partial and new prompts fill
  the rest of `max_num_batched_tokens` in chunks (chunked prefill); at most `max_num_seqs`
  run; a prompt is admitted only while its tokens fit in the KV cache; when decode growth
  overflows it, the newest running request is preempted and recomputed later.
- V0 (before 0.8) without chunked prefill: a step either prefills whole waiting prompts
  (prefill first) or decodes every running sequence.

Without a request rate, what is scheduled at each step does not depend on how long the
steps take (arrivals follow completions), so a run is replayed once and any cost model's
step times turn it into TTFT, TPOT and throughput (`Trajectory.timings`). That is what makes
fitting the cost model fast. With a request rate, arrivals depend on time, so the replay
takes the step-time function as it goes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

MAX_STEPS = 2_000_000  # a guard: no benchmark of this scale needs more steps


@dataclass(frozen=True)
class EngineLimits:
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_tokens: int  # KV cache capacity of the rank, tokens
    block_size: int
    chunked_prefill: bool = True


@dataclass(frozen=True)
class Client:
    concurrency: int | None  # None: no limit (all prompts in flight)
    request_rate: float | None = None  # requests/s to this engine; None: all at once


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


StepFn = Callable[[float, float, float, float, float, float], float]


def replay(
    input_len: np.ndarray,
    output_len: np.ndarray,
    limits: EngineLimits,
    client: Client,
    step_time: StepFn | None = None,
    v0_scheduler: bool = False,
) -> Trajectory:
    """Run the scheduler over the requests, in order, until every one has finished."""
    n = int(input_len.size)
    need = input_len.astype(np.int64).copy()  # prompt tokens to (re)compute
    out = np.maximum(output_len.astype(np.int64), 1)
    prefilled = np.zeros(n, np.int64)
    generated = np.zeros(n, np.int64)
    running = np.zeros(n, bool)
    arrival_step = np.full(n, -1, np.int64)
    first_step = np.full(n, -1, np.int64)
    finish_step = np.full(n, -1, np.int64)
    arrival_s = np.zeros(n) if client.request_rate else None
    order: list[int] = []  # running requests, oldest admission first
    waiting: deque[int] = deque()
    next_request = 0
    in_flight = 0
    cap = client.concurrency or n
    clock = 0.0
    preemptions = 0
    feats: list[tuple[float, ...]] = []
    ends: list[float] = []
    budget_tokens = limits.max_num_batched_tokens
    half_block = limits.block_size / 2

    def arrive(step: int) -> None:
        nonlocal next_request, in_flight
        while next_request < n and in_flight < cap:
            if client.request_rate:
                due = next_request / client.request_rate
                if due > clock:
                    break
                arrival_s[next_request] = due  # type: ignore[index]
            arrival_step[next_request] = step
            waiting.append(next_request)
            next_request += 1
            in_flight += 1

    kv_used = 0.0
    step = 0
    arrive(0)
    while (next_request < n or waiting or order) and step < MAX_STEPS:
        if not order and not waiting:  # idle until the next timed arrival
            clock = next_request / client.request_rate if client.request_rate else clock
            arrive(step)
            continue
        chunks: dict[int, int] = {}
        decoders = [i for i in order if prefilled[i] >= need[i]]
        if v0_scheduler and not limits.chunked_prefill:
            chunks = _v0_prefill(waiting, order, need, limits, kv_used, half_block)
            if chunks:
                decoders = []
        else:
            # Decode growth first: preempt the newest request while the KV would overflow.
            while decoders and kv_used + len(decoders) + half_block * len(order) > limits.kv_tokens:
                victim = order.pop()
                kv_used -= prefilled[victim] + (generated[victim] if prefilled[victim] else 0)
                need[victim] = input_len[victim] + generated[victim]
                prefilled[victim] = 0
                running[victim] = False
                waiting.appendleft(victim)
                preemptions += 1
                decoders = [i for i in order if prefilled[i] >= need[i]]
            budget = budget_tokens - len(decoders)
            for i in order:
                if budget <= 0:
                    break
                if prefilled[i] < need[i]:
                    take = int(min(need[i] - prefilled[i], budget))
                    chunks[i] = take
                    budget -= take
            while budget > 0 and waiting and len(order) < limits.max_num_seqs:
                i = waiting[0]
                take = int(min(need[i], budget))
                if not limits.chunked_prefill and take < need[i]:
                    break
                if kv_used + take + half_block * (len(order) + 1) > limits.kv_tokens:
                    break
                waiting.popleft()
                order.append(i)
                running[i] = True
                chunks[i] = take
                budget -= take
                kv_used += 0  # counted below with the step's tokens
        d = len(decoders)
        ctx = float(sum(int(prefilled[i] + generated[i]) for i in decoders)) if d else 0.0
        p = float(sum(chunks.values()))
        pairs = float(sum(c * (prefilled[i] + c / 2) for i, c in chunks.items()))
        seqs = d + len(chunks)
        starting = sum(1 for i in chunks if prefilled[i] == 0 and generated[i] == 0)
        if seqs == 0:  # nothing fits: a prompt larger than the whole KV cache
            raise ValueError("a request needs more KV than the engine has")
        feats.append((d, ctx, p, pairs, seqs, starting, len(order)))
        if step_time is not None:
            clock += step_time(d, ctx, p, pairs, seqs, starting)
            ends.append(clock)
        for i in decoders:
            generated[i] += 1
        kv_used += d + p
        for i, c in chunks.items():
            prefilled[i] += c
            if prefilled[i] >= need[i]:
                generated[i] += 1
                kv_used += 1
                if first_step[i] < 0:
                    first_step[i] = step
        done = [i for i in order if generated[i] >= out[i]]
        if done:
            for i in done:
                finish_step[i] = step
                running[i] = False
                kv_used -= prefilled[i] + generated[i]
            gone = set(done)
            order = [i for i in order if i not in gone]
            in_flight -= len(done)
        step += 1
        arrive(step)
    if step >= MAX_STEPS:
        raise ValueError("the replay did not finish: the engine cannot make progress")
    arr = np.asarray(feats, dtype=float).reshape(-1, 7)
    return Trajectory(
        decode=arr[:, 0],
        decode_context=arr[:, 1],
        prefill=arr[:, 2],
        prefill_pairs=arr[:, 3],
        seqs=arr[:, 4],
        new_requests=arr[:, 5],
        running=arr[:, 6],
        arrival_step=arrival_step,
        first_step=first_step,
        finish_step=finish_step,
        output_len=out,
        preemptions=preemptions,
        step_end_s=np.asarray(ends) if step_time is not None else None,
        arrival_s=arrival_s,
    )


def _v0_prefill(
    waiting: deque[int],
    order: list[int],
    need: np.ndarray,
    limits: EngineLimits,
    kv_used: float,
    half_block: float,
) -> dict[int, int]:
    """V0's prefill step: whole waiting prompts while they fit the token budget, the
    sequence limit and the KV cache."""
    chunks: dict[int, int] = {}
    budget = limits.max_num_batched_tokens
    reserved = 0.0
    while waiting and len(order) < limits.max_num_seqs:
        i = waiting[0]
        size = int(need[i])
        if size > budget:
            break
        if kv_used + reserved + size + half_block * (len(order) + 1) > limits.kv_tokens:
            break
        waiting.popleft()
        order.append(i)
        chunks[i] = size
        budget -= size
        reserved += size
    return chunks

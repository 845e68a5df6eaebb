"""A step-by-step replay of vLLM's scheduler for one engine rank under a benchmark client.

The client is `vllm bench serve`'s: N prompts, sent all at once (request rate inf), through
a closed loop of C concurrent requests (`--max-concurrency`), or at a fixed request rate.
The engine schedules as its release does:

- V1 (0.8+): every step, running sequences decode first, then partial and new prompts fill
  the rest of `max_num_batched_tokens` in chunks (chunked prefill); at most `max_num_seqs`
  run; a prompt is admitted only while its tokens fit in the KV cache; when decode growth
  overflows it, the newest running request is preempted and recomputed later. A preempted
  request comes back only when the KV it held, plus its next chunk, fits again: its blocks
  stay in the prefix cache, so vLLM's allocation for it counts them (without this, a long
  prompt that fits once would be admitted, preempted and recomputed chunk after chunk).
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

from vfleet.perf.trajectory import Trajectory

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
    sched = _Scheduler(input_len, output_len, limits, client, step_time)
    # Bound once: this loop runs every step of every costed run.
    v0_prefill_first = v0_scheduler and not limits.chunked_prefill
    schedule = sched.schedule_v0 if v0_prefill_first else sched.schedule
    record, advance, finish, arrive = sched.record, sched.advance, sched.finish, sched.arrive
    step = 0
    arrive(0)
    while (sched.next_request < sched.n or sched.waiting or sched.order) and step < MAX_STEPS:
        if not sched.order and not sched.waiting:
            sched.idle(step)
            continue
        decoders, chunks = schedule()
        record(decoders, chunks)
        advance(step, decoders, chunks)
        finish(step)
        step += 1
        arrive(step)
    if step >= MAX_STEPS:
        raise ValueError("the replay did not finish: the engine cannot make progress")
    return sched.trajectory()


class _Scheduler:
    """One engine rank's scheduler during a replay: the requests' progress, the running
    and waiting queues, the KV in use, and what each step carried. Each method is one part
    of a step; `replay` calls them in the engine's order.

    Token counts are whole numbers (exact as int or float), and the step's features and
    `kv_used` are summed in request order, so each trajectory is the same to the bit
    however the state is held.
    """

    __slots__ = (
        "arrival_s",
        "arrival_step",
        "cap",
        "clock",
        "ends",
        "feats",
        "finish_step",
        "first_step",
        "generated",
        "half_block",
        "held",
        "held_before",
        "in_flight",
        "kv_used",
        "limits",
        "n",
        "need",
        "next_request",
        "order",
        "out",
        "out_list",
        "preemptions",
        "prefilled",
        "prompt",
        "rate",
        "reserved",
        "step_time",
        "waiting",
    )

    def __init__(
        self,
        input_len: np.ndarray,
        output_len: np.ndarray,
        limits: EngineLimits,
        client: Client,
        step_time: StepFn | None,
    ) -> None:
        n = int(input_len.size)
        self.n = n
        self.limits = limits
        self.rate = client.request_rate
        self.cap = client.concurrency or n
        self.step_time = step_time
        # Per-request progress lives in Python lists: a step reads and bumps a few entries
        # per running request, which costs several times less on a list than on an array
        # scalar, and whole-number arithmetic (exact in both) gives the same features.
        self.prompt: list[int] = input_len.astype(np.int64).tolist()
        self.need: list[int] = list(self.prompt)  # prompt tokens to (re)compute
        self.held_before: list[int] = [0] * n  # KV a preempted request held when it stopped
        self.out = np.maximum(output_len.astype(np.int64), 1)
        self.out_list: list[int] = self.out.tolist()
        self.prefilled = [0] * n
        self.generated = [0] * n
        # KV tokens each request holds now. Not prefilled + generated: a recomputed request
        # prefills its earlier output again as prompt, so those tokens would count twice.
        self.held = [0] * n
        self.arrival_step = np.full(n, -1, np.int64)
        self.first_step = np.full(n, -1, np.int64)
        self.finish_step = np.full(n, -1, np.int64)
        self.arrival_s = np.zeros(n) if client.request_rate else None
        self.order: list[int] = []  # running requests, oldest admission first
        self.waiting: deque[int] = deque()
        self.next_request = 0
        self.in_flight = 0
        self.clock = 0.0
        self.kv_used = 0.0
        self.reserved = 0.0  # KV the step being scheduled will add
        self.preemptions = 0
        self.feats: list[tuple[float, ...]] = []
        self.ends: list[float] = []
        self.half_block = limits.block_size / 2

    def arrive(self, step: int) -> None:
        """Let the client send requests while it has room (on a clock: those now due)."""
        rate, waiting = self.rate, self.waiting
        while self.next_request < self.n and self.in_flight < self.cap:
            if rate:
                due = self.next_request / rate
                if due > self.clock:
                    break
                self.arrival_s[self.next_request] = due  # type: ignore[index]
            self.arrival_step[self.next_request] = step
            waiting.append(self.next_request)
            self.next_request += 1
            self.in_flight += 1

    def idle(self, step: int) -> None:
        """Nothing to run: jump the clock to the next timed arrival."""
        if self.rate:
            self.clock = self.next_request / self.rate
        self.arrive(step)

    def schedule_v0(self) -> tuple[list[int], dict[int, int]]:
        """V0 without chunked prefill: whole waiting prompts if any fit, else decode all."""
        chunks = _v0_prefill(
            self.waiting, self.order, self.need, self.limits, self.kv_used, self.half_block
        )
        if chunks:
            return [], chunks
        # No prompt was admitted, so the running set is what it was before the attempt.
        return self._decoders(), chunks

    def schedule(self) -> tuple[list[int], dict[int, int]]:
        """V1: decode first, then partial prompts, then new ones, within the token budget
        and the KV cache: what the step will add to the cache is reserved as each request
        is scheduled, and a running request that cannot grow preempts the newest ones."""
        decoders = self._preempt_for_decode()
        chunks: dict[int, int] = {}
        self.reserved = float(len(decoders))
        budget = self.limits.max_num_batched_tokens - len(decoders)
        budget = self._continue_prefills(budget, chunks, decoders)
        self._admit(budget, chunks)
        return decoders, chunks

    def _decoders(self) -> list[int]:
        prefilled, need = self.prefilled, self.need
        return [i for i in self.order if prefilled[i] >= need[i]]

    def _preempt(self, victim: int) -> None:
        """Stop a running request and free its KV; it waits first in line and recomputes
        its prompt and the output it had (vLLM's recompute preemption)."""
        self.held_before[victim] = self.prefilled[victim]
        self.kv_used -= self.held[victim]
        self.held[victim] = 0
        self.need[victim] = self.prompt[victim] + self.generated[victim]
        self.prefilled[victim] = 0
        self.waiting.appendleft(victim)
        self.preemptions += 1

    def _preempt_for_decode(self) -> list[int]:
        """This step's decoders, after preempting the newest running requests while their
        decode growth would overflow the KV cache."""
        order = self.order
        kv_tokens, half_block = self.limits.kv_tokens, self.half_block
        decoders = self._decoders()
        while decoders and self.kv_used + len(decoders) + half_block * len(order) > kv_tokens:
            victim = order.pop()
            # Decoders keep the running order, so a decoding victim is the last of them:
            # dropping it is the list _decoders() would rebuild (once per victim, quadratic).
            if decoders[-1] == victim:
                decoders.pop()
            self._preempt(victim)
        return decoders

    def _room(self) -> float:
        """KV tokens the step may still add (a half block per running request kept free
        for the rounding of each request's last block)."""
        return (
            self.limits.kv_tokens - self.kv_used - self.reserved - self.half_block * len(self.order)
        )

    def _continue_prefills(self, budget: int, chunks: dict[int, int], decoders: list[int]) -> int:
        """Give running, partly prefilled prompts their next chunks, oldest first, each
        within the KV room (preempting newer running requests for it, as vLLM does);
        returns the token budget left."""
        prefilled, need, order = self.prefilled, self.need, self.order
        position = 0
        while position < len(order) and budget > 0:
            i = order[position]
            position += 1
            if prefilled[i] >= need[i]:
                continue
            take = int(min(need[i] - prefilled[i], budget))
            while self._grow(i, take) > self._room() and order[-1] != i:
                victim = order.pop()
                if decoders and decoders[-1] == victim:  # newer than i: not yet given chunks
                    decoders.pop()
                    self.reserved -= 1
                    budget += 1
                self._preempt(victim)
            take = min(take, int(self._room()) - 1)
            if take <= 0:
                continue  # no room even alone: it waits until older requests finish
            chunks[i] = take
            budget -= take
            self.reserved += self._grow(i, take)
        return budget

    def _grow(self, i: int, take: int) -> int:
        """KV a chunk adds: its tokens, and the first output token when it ends the prompt."""
        return take + (1 if self.prefilled[i] + take >= self.need[i] else 0)

    def _admit(self, budget: int, chunks: dict[int, int]) -> None:
        """Start waiting requests, oldest first, while the budget, the sequence limit and
        the KV cache allow (without chunked prefill, only whole prompts)."""
        waiting, order, need, limits = self.waiting, self.order, self.need, self.limits
        half_block = self.half_block
        while budget > 0 and waiting and len(order) < limits.max_num_seqs:
            i = waiting[0]
            take = int(min(need[i], budget))
            if not limits.chunked_prefill and take < need[i]:
                break
            # A request preempted before needs room for what it held, not one chunk, or it
            # would be admitted, preempted and recomputed chunk after chunk.
            held = min(self.held_before[i] + take, need[i])
            grow = max(take + (1 if take >= need[i] else 0), held)
            if grow > self._room() - half_block:
                break
            waiting.popleft()
            order.append(i)
            chunks[i] = take
            budget -= take
            self.reserved += take + (1 if take >= need[i] else 0)

    def record(self, decoders: list[int], chunks: dict[int, int]) -> None:
        """Note the step's features (and, on a clock, its end time)."""
        prefilled, generated, held = self.prefilled, self.generated, self.held
        d = len(decoders)
        ctx = float(sum(held[i] for i in decoders)) if d else 0.0
        p = float(sum(chunks.values()))
        pairs = float(sum(c * (prefilled[i] + c / 2) for i, c in chunks.items()))
        seqs = d + len(chunks)
        starting = sum(1 for i in chunks if prefilled[i] == 0 and generated[i] == 0)
        if seqs == 0:  # nothing fits: a prompt larger than the whole KV cache
            raise ValueError("a request needs more KV than the engine has")
        self.feats.append((d, ctx, p, pairs, seqs, starting, len(self.order)))
        if self.step_time is not None:
            self.clock += self.step_time(d, ctx, p, pairs, seqs, starting)
            self.ends.append(self.clock)

    def advance(self, step: int, decoders: list[int], chunks: dict[int, int]) -> None:
        """Run the step: each decoder gains a token, each chunk's tokens enter the KV, and a
        prompt whose last chunk ran yields its first token."""
        prefilled, generated, need, first_step = (
            self.prefilled,
            self.generated,
            self.need,
            self.first_step,
        )
        held = self.held
        for i in decoders:
            generated[i] += 1
            held[i] += 1
        kv_used = self.kv_used + (len(decoders) + float(sum(chunks.values())))
        for i, c in chunks.items():
            prefilled[i] += c
            held[i] += c
            if prefilled[i] >= need[i]:
                generated[i] += 1
                held[i] += 1
                kv_used += 1
                if first_step[i] < 0:
                    first_step[i] = step
        self.kv_used = kv_used

    def finish(self, step: int) -> None:
        """Retire the requests that have all their output tokens, freeing their KV."""
        generated, out = self.generated, self.out_list
        done = [i for i in self.order if generated[i] >= out[i]]
        if not done:
            return
        held, finish_step = self.held, self.finish_step
        for i in done:
            finish_step[i] = step
            self.kv_used -= held[i]
            held[i] = 0
        gone = set(done)
        self.order = [i for i in self.order if i not in gone]
        self.in_flight -= len(done)

    def trajectory(self) -> Trajectory:
        arr = np.asarray(self.feats, dtype=float).reshape(-1, 7)
        return Trajectory(
            decode=arr[:, 0],
            decode_context=arr[:, 1],
            prefill=arr[:, 2],
            prefill_pairs=arr[:, 3],
            seqs=arr[:, 4],
            new_requests=arr[:, 5],
            running=arr[:, 6],
            arrival_step=self.arrival_step,
            first_step=self.first_step,
            finish_step=self.finish_step,
            output_len=self.out,
            preemptions=self.preemptions,
            step_end_s=np.asarray(self.ends) if self.step_time is not None else None,
            arrival_s=self.arrival_s,
        )


def _v0_prefill(
    waiting: deque[int],
    order: list[int],
    need: list[int],
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

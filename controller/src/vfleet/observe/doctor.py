"""`vfleet doctor`: read a running deployment's metrics (and logs), name what is wrong and
the first knob to turn, with the evidence and the numbers from the budget engine.

The high-concurrency rules' last two questions (docs/high-concurrency-rules.md), answered
from the running system:
- tail latency collapses while throughput rises: chunked prefill off, or overload?
- OOM or frequent preemption: which knob first, instead of a blind restart?
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from vfleet.observe.findings import Diagnosis, EngineConfig
from vfleet.observe.metrics import Snapshot

HEADROOM = 0.9
# A decode step that carries a whole prefill shows as an inter-token p99 several times p50.
ITL_TAIL_RATIO = 3.0


@dataclass
class Observation:
    """Signals over the watch window (or one scrape), already reduced."""

    running: float
    waiting: float
    waiting_share: float  # fraction of samples with requests waiting
    kv_usage: float
    preemptions: float
    preemption_rate: float | None
    requests_done: float
    prompt_tokens_rate: float | None
    generation_tokens_rate: float | None
    ttft_p50: float | None
    ttft_p99: float | None
    itl_p50: float | None
    itl_p99: float | None
    queue_p99: float | None
    mean_prompt: float | None
    mean_generation: float | None
    num_gpu_blocks: int | None
    block_size: int | None
    seconds: float
    engines: int
    notes: list[str] = field(default_factory=list)  # series the parser left out
    # Prefill/decode only (0 elsewhere): prompt tokens computed here or pulled from another
    # engine, NIXL transfers that failed, KV released before a decode engine read it.
    prompt_local: float = 0.0
    prompt_transferred: float = 0.0
    kv_transfer_failures: float = 0.0
    kv_expired: float = 0.0

    @property
    def kv_tokens(self) -> int | None:
        if self.num_gpu_blocks and self.block_size:
            return self.num_gpu_blocks * self.block_size
        return None

    @property
    def mean_context(self) -> float | None:
        if self.mean_prompt is None:
            return None
        return self.mean_prompt + (self.mean_generation or 0) / 2


def observe(samples: list[tuple[float, Snapshot]]) -> Observation:
    """Reduce one or more (time, snapshot) scrapes to one observation."""
    (t0, first), (t1, last) = samples[0], samples[-1]
    span = t1 - t0

    def rate(key: str) -> float | None:
        return (last.get(key) - first.get(key)) / span if span > 0 else None

    def grew(key: str) -> float:
        """A counter's growth over the window; its total for one scrape."""
        return last.get(key) - first.get(key) if span > 0 else last.get(key)

    ttft, itl = last.histograms.get("ttft"), last.histograms.get("itl")
    queue, prompt = last.histograms.get("queue"), last.histograms.get("prompt_len")
    done = last.get("requests_done")
    cfg = last.cache_config
    notes = list(dict.fromkeys(n for _, s in samples for n in s.notes))
    num_gpu_blocks, block_size = (
        _info_count(cfg, k, notes) for k in ("num_gpu_blocks", "block_size")
    )
    return Observation(
        running=max(s.get("running") for _, s in samples),
        waiting=max(s.get("waiting") for _, s in samples),
        waiting_share=sum(1 for _, s in samples if s.get("waiting") > 0) / len(samples),
        kv_usage=max(s.get("kv_usage") for _, s in samples),
        preemptions=last.get("preemptions"),
        preemption_rate=rate("preemptions"),
        requests_done=done,
        prompt_tokens_rate=rate("prompt_tokens"),
        generation_tokens_rate=rate("generation_tokens"),
        ttft_p50=ttft.quantile(0.5) if ttft else None,
        ttft_p99=ttft.quantile(0.99) if ttft else None,
        itl_p50=itl.quantile(0.5) if itl else None,
        itl_p99=itl.quantile(0.99) if itl else None,
        queue_p99=queue.quantile(0.99) if queue else None,
        mean_prompt=(
            prompt.mean
            if prompt and prompt.count
            else (last.get("prompt_tokens") / done if done else None)
        ),
        mean_generation=last.get("generation_tokens") / done if done else None,
        num_gpu_blocks=num_gpu_blocks,
        block_size=block_size,
        seconds=span,
        engines=last.engines,
        notes=notes,
        prompt_local=grew("prompt_local"),
        prompt_transferred=grew("prompt_transferred"),
        kv_transfer_failures=grew("kv_transfer_failures"),
        kv_expired=grew("kv_expired"),
    )


def _info_count(info: dict[str, str], key: str, notes: list[str]) -> int | None:
    """A count from vllm:cache_config_info's labels; anything but a whole number >= 1 is
    left out with a note (the KV cap would be built on it)."""
    raw = info.get(key, "None")
    if raw in ("None", ""):
        return None
    if raw.isascii() and raw.isdigit() and 0 < int(raw) < 1 << 40:
        return int(raw)
    notes.append(f"vllm:cache_config_info {key}={raw[:20]!r} ignored: not a whole number >= 1")
    return None


def kv_cap(obs: Observation) -> int | None:
    """Sequences the engine's KV holds at the observed mean context, with 10% headroom."""
    if not obs.kv_tokens or not obs.mean_context:
        return None
    return max(1, int(HEADROOM * obs.kv_tokens / obs.mean_context))


def ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e3:.0f} ms"


# ---- log signals -------------------------------------------------------------------------
# Numbers as vLLM prints them, bounded so that int()/float() always take them and a long
# hostile log cannot make a lazy `.*?` scan quadratic.
def metric_diagnoses(obs: Observation, cfg: EngineConfig) -> list[Diagnosis]:
    found: list[Diagnosis] = []
    cap = kv_cap(obs)
    seqs = cfg.max_num_seqs
    per_engine_running = obs.running / max(obs.engines, 1)
    preempting = (obs.preemption_rate or 0) > 0 or (
        obs.preemption_rate is None and obs.preemptions > 0
    )
    if preempting:
        evidence = [
            f"{obs.preemptions:.0f} preemptions"
            + (
                f" ({obs.preemption_rate:.2f}/s over {obs.seconds:.0f} s)"
                if obs.preemption_rate is not None
                else f" over {obs.requests_done:.0f} finished requests"
            ),
            f"KV cache usage peaked at {obs.kv_usage * 100:.0f}%",
        ]
        if cap:
            evidence.append(
                f"KV holds {obs.kv_tokens} tokens: {cap} sequences at the observed "
                f"mean context of {obs.mean_context:.0f} tokens (10% headroom)"
            )
        if seqs and cap and seqs > cap:
            knob = f"lower --max-num-seqs from {seqs} to {cap} (the KV cap)"
        else:
            knob = (
                "raise --gpu-memory-utilization, use --kv-cache-dtype fp8, add DCP "
                "(MLA models) or replicas: the KV cache, not the batch limit, is short"
            )
        found.append(
            Diagnosis(
                "kv_pressure",
                "KV pressure is preempting requests (recompute: tail latency suffers)",
                evidence,
                knob,
                [
                    "`vfleet budget --sweep-gpu-memory-utilization 0.8:0.95:0.01` shows how "
                    "many more sequences each step of utilization buys"
                ],
            )
        )
    # Sustained: requests waited in at least half of the samples (or in the one scrape).
    sustained = obs.waiting > 0 and obs.waiting_share >= 0.5
    at_limit = seqs is not None and per_engine_running >= 0.9 * seqs
    if sustained and obs.kv_usage < 0.9 and not preempting and (at_limit or seqs is None):
        evidence = [
            f"{obs.waiting:.0f} requests waiting"
            + (" for the whole window" if obs.seconds > 0 else ""),
            f"{obs.running:.0f} running" + (f" = max-num-seqs {seqs}" if at_limit else ""),
            f"KV cache usage only {obs.kv_usage * 100:.0f}%",
        ]
        if obs.queue_p99 is not None:
            evidence.append(f"p99 queue time {ms(obs.queue_p99)}")
        if cap and seqs and cap > seqs:
            knob = f"raise --max-num-seqs from {seqs} to {cap} (still under the KV cap)"
        elif seqs:
            knob = f"add replicas: max-num-seqs {seqs} is already at the KV cap"
        else:
            knob = "raise --max-num-seqs up to the KV cap, or add replicas"
        found.append(
            Diagnosis("queueing", "Overload: requests queue while the KV has room", evidence, knob)
        )
    if (
        obs.itl_p50
        and obs.itl_p99
        and obs.itl_p99 >= ITL_TAIL_RATIO * obs.itl_p50
        and obs.itl_p99 >= 0.01
        and (obs.mean_prompt or 0) >= 256
    ):
        evidence = [
            f"inter-token latency p99 {ms(obs.itl_p99)} vs p50 {ms(obs.itl_p50)} "
            f"({obs.itl_p99 / obs.itl_p50:.0f}x)",
            f"mean prompt {obs.mean_prompt:.0f} tokens",
        ]
        if cfg.enable_chunked_prefill is False:
            knob = (
                "turn on --enable-chunked-prefill: whole prompts are prefilled inside decode steps"
            )
        elif cfg.max_num_batched_tokens:
            target = max(512, cfg.max_num_batched_tokens // 2)
            knob = (
                f"lower --max-num-batched-tokens from {cfg.max_num_batched_tokens} to "
                f"{target}: smaller prefill chunks per step"
            )
        else:
            knob = (
                "turn on --enable-chunked-prefill, or lower --max-num-batched-tokens "
                "(prefill chunks stall decode)"
            )
        found.append(
            Diagnosis(
                "prefill_interference",
                "Prefill interference: long prompts stall decoding",
                evidence,
                knob,
            )
        )
    if not found and obs.waiting == 0 and seqs and per_engine_running < 0.25 * seqs:
        found.append(
            Diagnosis(
                "under_use",
                "Under-used: the load, not the server, is the limit",
                [
                    f"{per_engine_running:.0f} running per engine of max-num-seqs {seqs}",
                    "nothing waiting",
                    f"KV cache usage {obs.kv_usage * 100:.0f}%",
                ],
                "send more load or consolidate replicas; no server knob will raise throughput",
            )
        )
    return found


def report_json(
    obs: Observation | None, cfg: EngineConfig, diagnoses: list[Diagnosis]
) -> dict[str, Any]:
    verdict = "problems" if diagnoses else ("healthy" if obs else "no_evidence")
    return {
        "verdict": verdict,
        "config": asdict(cfg),
        "observation": asdict(obs) if obs else None,
        "kv_cap": kv_cap(obs) if obs else None,
        "diagnoses": [asdict(d) for d in diagnoses],
    }


def report_text(
    obs: Observation | None, cfg: EngineConfig, diagnoses: list[Diagnosis], endpoints: list[str]
) -> str:
    lines = [f"vfleet doctor: {', '.join(endpoints) or 'logs only'}"]
    if obs:
        window = f"over {obs.seconds:.0f} s" if obs.seconds > 0 else "one scrape"
        lines += [
            "",
            f"  Signals ({window}, {obs.engines} engine(s)):",
            f"    running {obs.running:.0f}   waiting {obs.waiting:.0f}   KV usage "
            f"{obs.kv_usage * 100:.0f}%   preemptions {obs.preemptions:.0f}"
            + (f" ({obs.preemption_rate:.2f}/s)" if obs.preemption_rate is not None else ""),
            f"    TTFT p50/p99 {ms(obs.ttft_p50)} / {ms(obs.ttft_p99)}   inter-token p50/p99 "
            f"{ms(obs.itl_p50)} / {ms(obs.itl_p99)}   queue p99 {ms(obs.queue_p99)}",
            f"    KV tokens {obs.kv_tokens or 'n/a'}   mean prompt "
            f"{obs.mean_prompt or 0:.0f}   mean output {obs.mean_generation or 0:.0f}   KV cap "
            f"{kv_cap(obs) or 'n/a'} seqs"
            + (
                f"   output {obs.generation_tokens_rate:.0f} tok/s"
                if obs.generation_tokens_rate is not None
                else ""
            ),
            f"    engine config from {cfg.source}: max-num-seqs {cfg.max_num_seqs or '?'}, "
            f"max-num-batched-tokens {cfg.max_num_batched_tokens or '?'}, chunked prefill "
            f"{ {True: 'on', False: 'off', None: '?'}[cfg.enable_chunked_prefill] }",
        ]
    if obs and obs.notes:
        lines += [f"    note: {n}" for n in obs.notes]
    lines.append("")
    if not diagnoses and obs:
        lines.append("  Healthy: no preemption, no queueing, latency tails in proportion.")
    elif not diagnoses:
        # Logs show start-up failures only; their silence says nothing about a live server.
        lines.append(
            "  No evidence: the logs show no start-up failure, and without --endpoint there "
            "are no live signals to judge the server by."
        )
    lines += numbered(diagnoses)
    return "\n".join(lines)


def numbered(diagnoses: list[Diagnosis]) -> list[str]:
    """Each diagnosis as the report prints it: title, evidence, first knob, the rest."""
    lines = []
    for i, d in enumerate(diagnoses, start=1):
        lines.append(f"  {i}. {d.title}")
        lines += [f"     - {e}" for e in d.evidence]
        lines.append(f"     First knob: {d.first_knob}")
        lines += [f"     Also: {m}" for m in d.more]
    return lines

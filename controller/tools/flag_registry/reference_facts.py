"""Facts about when flags appeared and went, stated in docs/references.md (the flag history),
checked against the registry: `generate.py --check`."""

from __future__ import annotations

from typing import Any

from release_table import version_key

# (option, first release that has it or None, first release that no longer has it or None).
REFERENCE_FACTS: tuple[tuple[str, str | None, str | None], ...] = (
    # removed
    ("--num-scheduler-steps", None, "0.10.1.1"),
    ("--use-v2-block-manager", None, "0.10.1.1"),
    ("--device", None, "0.10.1.1"),
    ("--tokenizer-pool-size", None, "0.10.1.1"),
    ("--max-seq-len-to-capture", None, "0.11.0"),
    ("--preemption-mode", None, "0.11.0"),
    ("--scheduler-delay-factor", None, "0.11.0"),
    ("--disable-async-output-proc", None, "0.11.0"),
    ("--guided-decoding-backend", None, "0.12.0"),
    ("--disable-log-requests", None, "0.17.1"),
    ("--swap-space", None, "0.18.1"),
    ("--calculate-kv-scales", None, "0.30.0"),
    ("--max-num-partial-prefills", None, "0.30.0"),
    ("--num-redundant-experts", "0.9.2", "0.12.0"),
    ("--eplb-window-size", "0.9.2", "0.12.0"),
    ("--eplb-step-interval", "0.9.2", "0.12.0"),
    ("--eplb-log-balancedness", "0.9.2", "0.12.0"),
    ("--cuda-graph-sizes", "0.9.2", "0.13.0"),
    # present throughout
    ("--enable-chunked-prefill", None, None),
    ("--no-enable-chunked-prefill", None, None),
    ("--enable-prefix-caching", None, None),
    ("--no-enable-prefix-caching", None, None),
    ("--data-parallel-size", None, None),
    ("-dp", None, None),
    ("--enable-expert-parallel", None, None),
    ("--gpu-memory-utilization", None, None),
    ("--max-num-seqs", None, None),
    ("--max-num-batched-tokens", None, None),
    ("--max-model-len", None, None),
    ("--block-size", None, None),
    ("--kv-cache-dtype", None, None),
    ("--tensor-parallel-size", None, None),
    ("-tp", None, None),
    ("--pipeline-parallel-size", None, None),
    ("-pp", None, None),
    ("--distributed-executor-backend", None, None),
    ("--cpu-offload-gb", None, None),
    ("--enable-sleep-mode", None, None),
    ("--long-prefill-token-threshold", None, None),
    # added
    ("--headless", "0.9.2", None),
    ("--data-parallel-size-local", "0.9.2", None),
    ("--data-parallel-address", "0.9.2", None),
    ("--data-parallel-rpc-port", "0.9.2", None),
    ("--data-parallel-start-rank", "0.9.2", None),
    ("--data-parallel-backend", "0.9.2", None),
    ("--api-server-count", "0.9.2", None),
    ("--enable-eplb", "0.9.2", None),
    ("--disable-hybrid-kv-cache-manager", "0.9.2", None),
    ("--enable-log-requests", "0.10.1.1", None),
    ("--async-scheduling", "0.10.1.1", None),
    ("--data-parallel-hybrid-lb", "0.10.1.1", None),
    ("--eplb-config", "0.10.2", None),
    ("--kv-cache-memory-bytes", "0.10.2", None),
    ("--decode-context-parallel-size", "0.10.2", None),
    ("-dcp", "0.10.2", None),
    ("--enable-dbo", "0.11.0", None),
    ("--nnodes", "0.11.1", None),
    ("-n", "0.11.1", None),
    ("--node-rank", "0.11.1", None),
    ("-r", "0.11.1", None),
    ("--master-addr", "0.11.1", None),
    ("--master-port", "0.11.1", None),
    ("--data-parallel-external-lb", "0.11.1", None),
    ("--all2all-backend", "0.11.1", None),
    ("--max-cudagraph-capture-size", "0.11.1", None),
    ("--kv-offloading-size", "0.11.1", None),
    ("--kv-offloading-backend", "0.11.1", None),
    ("--prefill-context-parallel-size", "0.12.0", None),
    ("-pcp", "0.12.0", None),
    ("--optimization-level", "0.12.0", None),
    ("--attention-backend", "0.13.0", None),
    ("--performance-mode", "0.17.1", None),
    ("--moe-backend", "0.17.1", None),
    ("--max-num-scheduled-tokens", "0.30.0", None),
    ("--mamba-cache-mode", "0.33.0", None),
    ("--monokernel", "0.33.0", None),
    ("--reasoning-effort-map", "0.33.0", None),
    ("--sleep-mode-backend", "0.33.0", None),
    ("--watchdog-config", "0.33.0", None),
)


def expected_presence(version: str, first: str | None, gone: str | None) -> bool:
    k = version_key(version)
    if first is not None and k < version_key(first):
        return False
    return not (gone is not None and k >= version_key(gone))


def check(reg: dict[str, Any]) -> list[str]:
    """Mismatches between the registry and the REFERENCE_FACTS (empty list: all agree)."""
    problems: list[str] = []
    for opt, first, gone in REFERENCE_FACTS:
        for version, entry in reg["versions"].items():
            if entry.get("status") != "ok":
                continue
            canonical = entry["option_index"].get(opt)
            present = canonical is not None
            want = expected_presence(version, first, gone)
            if present != want:
                how = ""
                if present and canonical != opt:
                    how = f" (as a spelling of {canonical})"
                problems.append(
                    f"{opt} in {version}: registry says {'present' if present else 'absent'}"
                    f"{how}, docs/references.md says {'present' if want else 'absent'}"
                )
    return problems

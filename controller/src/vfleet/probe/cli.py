"""`python -m vfleet.probe FACTS_DIR [--allow-partial]`: what the probe facts in a directory
read as, normalised per host, and the cluster they make, printed as JSON, for checking a
probe run by eye without planning anything."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from vfleet.errors import UserError
from vfleet.probe.to_cluster import cluster_from_facts, load_facts_dir


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m vfleet.probe DIR [--allow-partial]`: print the normalised facts and spec."""
    args = list(sys.argv[1:] if argv is None else argv)
    allow = "--allow-partial" in args
    paths = [a for a in args if a != "--allow-partial"]
    if len(paths) != 1:
        print("usage: python -m vfleet.probe FACTS_DIR [--allow-partial]", file=sys.stderr)
        return 2
    try:
        hosts = load_facts_dir(Path(paths[0]))
        spec = cluster_from_facts(hosts, allow_partial=allow)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    summary = {
        "nodes": [{**asdict(n), "gpu": n.gpu.name} for n in spec.nodes],
        "intra_node": asdict(spec.intra_node),
        "inter_node": asdict(spec.inter_node),
        "vllm_version": spec.vllm_version,
        "vllm_flags": len(spec.vllm_flags),
    }
    print(json.dumps({"facts": hosts, "cluster": summary}, indent=2))
    return 0

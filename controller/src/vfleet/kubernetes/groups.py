"""Each pool of a plan as LeaderWorkerSet groups: one group per engine, one pod per host the
engine spans on the planned cluster.

LWS gives every worker of a group the same pod template, so the plan must give every host
of an engine the same number of GPUs (a plan for hosts of different sizes may not; it is
refused). The launch mode is the host render's choice
(vfleet.render.engines.choose_mode): one pod, TP/PP across pods with the mp backend (Ray
before vLLM 0.11.1), or data parallel across pods.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vfleet.catalog.releases import parse_version
from vfleet.documents.lws import MAX_NAME
from vfleet.documents.plan import Plan
from vfleet.errors import UserError
from vfleet.render.disaggregated import prefill_plan
from vfleet.render.engines import choose_mode
from vfleet.render.kv_transfer import Role
from vfleet.topology.cluster import Cluster, Node


@dataclass(frozen=True)
class Group:
    """The engines of one pool as one LeaderWorkerSet."""

    name: str  # the LeaderWorkerSet's name
    plan: Plan  # the pool's plan (a disaggregated plan's prefill pool has its own)
    pool: Role | None  # None: an aggregated plan's only pool
    replicas: int  # engines, one LWS group each
    size: int  # pods per group, leader included
    gpus: int  # GPUs per pod
    mode: str  # single | mp | ray | dp
    dp_local: int  # data-parallel ranks per pod
    node: Node  # a host of the pool: its HCAs stand for every pod's node

    @property
    def version(self) -> str:
        return self.plan.vllm_version

    @property
    def release(self) -> tuple[int, int, int]:
        return parse_version(self.plan.vllm_version)

    @property
    def engine_gpus(self) -> int:
        """GPUs one engine runs on (decode context parallel shares the TP GPUs)."""
        p = self.plan
        return p.tensor_parallel_size * p.pipeline_parallel_size * p.data_parallel_size


def base_name(served_model_name: str) -> str:
    """The served name's last part as a DNS label (Llama-3.1-8B -> llama-3-1-8b)."""
    tail = served_model_name.rstrip("/").split("/")[-1].lower()
    label = re.sub(r"[^a-z0-9]+", "-", tail).strip("-")[:MAX_NAME].rstrip("-")
    return label or "vllm"


def _group(plan: Plan, pool: Role | None, name: str, backend: str, nodes: dict[str, Node]) -> Group:
    engines: dict[str, list[int]] = {}
    for host in plan.hosts:
        for replica, ranks in host.engines.items():
            engines.setdefault(replica, []).append(len(ranks))
    shapes = {tuple(per_host) for per_host in engines.values()}
    gpus = {n for shape in shapes for n in shape}
    sizes = {len(shape) for shape in shapes}
    what = f"the {pool} pool" if pool else "the plan"
    if len(gpus) != 1 or len(sizes) != 1:
        raise UserError(
            f"{what} gives its engines' hosts {sorted(gpus)} GPUs over {sorted(sizes)} hosts: "
            "a LeaderWorkerSet gives every pod of a group one template, so plan for hosts "
            "of one size (a cluster spec of equal nodes, or a --layout whose engines fill "
            "equal shares of them)"
        )
    size, per_pod = sizes.pop(), gpus.pop()
    dp = plan.data_parallel_size
    mode = choose_mode(size, dp, backend, parse_version(plan.vllm_version))
    if mode == "dp" and dp % size:
        raise UserError(
            f"{what} splits {dp} data-parallel ranks over {size} pods unevenly: re-plan"
        )
    first = next(h.host for h in plan.hosts if h.engines)
    return Group(
        name=name,
        plan=plan,
        pool=pool,
        replicas=len(engines),
        size=size,
        gpus=per_pod,
        mode=mode,
        dp_local=dp // size if mode == "dp" else dp,
        node=nodes[first],
    )


def groups(plan: Plan, cluster: Cluster, base: str, backend: str) -> list[Group]:
    """The plan's pools as groups: one for an aggregated plan; prefill then decode for a
    disaggregated one."""
    nodes = {n.name: n for n in cluster.nodes}
    missing = sorted({h.host for h in plan.hosts} - set(nodes))
    if missing:
        raise UserError(
            f"the plan places engines on {missing[0]}, which the cluster spec lacks: render "
            "with the cluster the plan was made for"
        )
    if not plan.serves_disaggregated:
        return [_group(plan, None, base, backend, nodes)]
    return [
        _group(prefill_plan(plan), "prefill", f"{base}-prefill", backend, nodes),
        _group(plan, "decode", f"{base}-decode", backend, nodes),
    ]

"""What a plan and a cluster must satisfy before anything is rendered from them.

Host names, engine ids and addresses become paths, unit names and unit text, and the plan
may be older than the cluster spec: both are refused here, up front, with a fix to apply.
"""

from __future__ import annotations

from vfleet.documents.plan import Plan
from vfleet.errors import UserError
from vfleet.inputs.values import check_address, check_label
from vfleet.render.types import Placement
from vfleet.topology.cluster import Cluster, Node


def check_plan_matches_cluster(plan: Plan, cluster: Cluster) -> None:
    nodes = {n.name: n for n in cluster.nodes}
    gpu_names = {n.gpu.name for n in cluster.nodes}
    if plan.gpu and plan.gpu not in gpu_names:
        raise UserError(
            f"plan is for {plan.gpu} but the cluster has {', '.join(sorted(gpu_names))}: "
            "re-plan against this cluster"
        )
    for host in plan.hosts:
        name = host.host
        if name not in nodes:
            raise UserError(
                f"plan places ranks on host {name!r}, which the cluster does not have "
                f"(hosts: {', '.join(nodes)}): re-plan against these facts"
            )
        gpus = [r.gpu for ranks in host.engines.values() for r in ranks]
        node = nodes[name]
        if len(gpus) > node.gpus or any(g >= node.gpus or g < 0 for g in gpus):
            raise UserError(
                f"plan puts {len(gpus)} ranks on host {name} (GPUs {sorted(gpus)}) but it has "
                f"{node.gpus} GPUs: re-plan against these facts"
            )
        if len(set(gpus)) != len(gpus):
            raise UserError(f"plan gives one GPU of host {name} to two ranks: re-plan")


def check_names(plan: Plan, cluster: Cluster) -> None:
    """Host names, engine ids and addresses become paths, unit names and unit text."""
    for node in cluster.nodes:
        _check_node(node)
    for host in plan.hosts:
        for replica in host.engines:
            try:
                check_label(f"engine-{replica}")
            except ValueError as exc:
                raise UserError(
                    f"plan engine id {replica[:60]!r}: engine-{replica[:60]} {exc}: "
                    "re-run `vfleet plan --out`"
                ) from None


def _check_node(node: Node) -> None:
    try:
        check_label(node.name)
    except ValueError as exc:
        raise UserError(
            f"host name {node.name[:70]!r} {exc}: rename it in the cluster spec (it "
            "becomes a directory and a unit name)"
        ) from None
    if node.address is None:
        return
    try:
        check_address(node.address)
    except ValueError as exc:
        raise UserError(
            f"host {node.name}: address {node.address[:70]!r} {exc}: fix the cluster spec"
        ) from None


def check_addresses(replica: str, placement: Placement, nodes: dict[str, Node]) -> None:
    """An engine that spans hosts reaches its head by address: each host needs one."""
    missing = [h for h, _ in placement if not nodes[h].address]
    if len(placement) > 1 and missing:
        raise UserError(
            f"host {missing[0]} has no address, and engine {replica} spans hosts: "
            "add `address` to the cluster spec or plan from probe facts"
        )

"""`render`: a plan and a cluster spec in, the typed engines of every host out.

Pure: a plan, a cluster spec, options and a flag set in; a `Rendered` out. Its
files (launch.sh, vllm.env, units, endpoints.json, firewall.json) are vfleet.render.file_set'
job, and writing them to disk vfleet.render.write's.

Inert by construction: host names and engine ids are RFC 1123 labels before they become
file or unit names, every value reaches a file through its format's filter
(vfleet.render.formats), and operator extras (`--extra-arg`, `--env`) may not set what vfleet
owns (vfleet.documents.render).

Launch modes, chosen per engine from where its ranks sit (one strategy each, under
vfleet.render.modes):
- single: every rank on one host;
- mp: TP/PP across hosts with vLLM's multiprocessing backend (--nnodes, --node-rank,
  --master-addr; followers --headless), vLLM 0.11.1 and later;
- ray: TP/PP across hosts on a Ray cluster (head and worker units,
  --distributed-executor-backend ray), for older releases or when asked;
- dp: data parallel across hosts (--data-parallel-size/-size-local/-start-rank/-address/
  -rpc-port, followers --headless), with expert parallelism for MoE models.
Independent replicas are simply several engines, one endpoint each.
"""

from __future__ import annotations

from typing import Any

from vfleet.catalog.flag_registry import FlagSet
from vfleet.catalog.releases import parse_version
from vfleet.documents.plan import Plan
from vfleet.documents.render import check_env
from vfleet.render.disaggregated import (
    ROUTER_PORT_OFFSET,
    SideChannelBook,
    connect,
    prefill_plan,
    refuse_keyed_pools,
    router,
)
from vfleet.render.env_file import vfleet_env_names
from vfleet.render.kv_transfer import Role
from vfleet.render.modes import dp, mp, ray, single
from vfleet.render.modes.base import MP_MULTINODE, LaunchMode, Replica, Run
from vfleet.render.plan_checks import check_addresses, check_names, check_plan_matches_cluster
from vfleet.render.ports import PortBook
from vfleet.render.types import HostRender, Placement, Rendered, RenderOptions
from vfleet.topology.cluster import Cluster

# Re-exported: callers build options and read results from here.
__all__ = ["RenderOptions", "Rendered", "choose_mode", "render"]

MODES: dict[str, LaunchMode] = {
    "single": single.place,
    "mp": mp.place,
    "ray": ray.place,
    "dp": dp.place,
}


def choose_mode(hosts: int, data_parallel: int, backend: str, release: tuple[int, int, int]) -> str:
    """The launch mode of one engine, from how many hosts it spans, the plan's DP size and
    the requested backend (`auto` takes Ray only where mp cannot span hosts)."""
    if hosts <= 1:
        return "single"
    if data_parallel > 1:
        return "dp"
    if backend == "ray" or (backend == "auto" and release < MP_MULTINODE):
        return "ray"
    return "mp"  # mp.place refuses a release too old for it


def _replica_layout(plan: Plan) -> dict[str, Placement]:
    """replica id -> [(host name, ranks on that host)] in host order."""
    out: dict[str, Placement] = {}
    for host in plan.hosts:
        for replica, ranks in host.engines.items():
            out.setdefault(replica, []).append((host.host, ranks))
    return out


def _endpoint(job: Replica, model: str) -> dict[str, Any]:
    address = job.head.address
    base = f"http://{address or '127.0.0.1'}:{job.api_port}"
    return {
        "engine": job.engine_id,
        "mode": job.mode,
        "host": job.hosts[0],
        "address": address,
        "port": job.api_port,
        "url": f"{base}/v1",
        "health": f"{base}/health",
        "model": model,
        "hosts": job.hosts,
    }


def render(plan: Plan, cluster: Cluster, opts: RenderOptions, flags: FlagSet) -> Rendered:
    """Every engine of the plan; a disaggregated plan's prefill pool and router as well."""
    check_plan_matches_cluster(plan, cluster)
    check_names(plan, cluster)
    check_env(opts.extra_env, vfleet_env_names())
    nodes = {n.name: n for n in cluster.nodes}
    pools: list[tuple[Plan, Role | None]] = [(plan, None)]
    if plan.serves_disaggregated:
        refuse_keyed_pools("--api-key-file" if opts.api_key_file else None)
        prefill = prefill_plan(plan)
        check_plan_matches_cluster(prefill, cluster)
        check_names(prefill, cluster)
        pools = [(prefill, "prefill"), (plan, "decode")]
    names = [h.host for pool, _ in pools for h in pool.hosts]
    hosts = {name: HostRender(name, nodes[name].address, []) for name in dict.fromkeys(names)}
    ports = PortBook(hosts, opts)
    channels = SideChannelBook()
    endpoints: list[dict[str, Any]] = []
    modes: dict[str, str] = {}
    for pool, role in pools:
        version = pool.vllm_version or flags.version
        run = Run(
            plan=pool,
            cluster=cluster,
            opts=opts,
            flags=flags,
            nodes=nodes,
            version=version,
            release=parse_version(version),
            dp=pool.data_parallel_size,
            ports=ports,
        )
        for replica, placement in _replica_layout(pool).items():
            check_addresses(replica, placement, nodes)
            mode = choose_mode(len(placement), run.dp, opts.backend, run.release)
            modes[replica] = mode
            job = Replica(run, replica, mode, placement, run.ports.api(placement[0][0]))
            engines = MODES[mode](job)
            if role is not None:
                connect(engines, placement, nodes, role, pool, flags, channels)
            for (host_name, _), engine in zip(placement, engines, strict=True):
                hosts[host_name].engines.append(engine)
            endpoint = _endpoint(job, opts.served_model_name)
            if role is not None:
                endpoint["pool"] = role
            endpoints.append(endpoint)
    front = None
    if plan.serves_disaggregated:
        port = opts.port + ROUTER_PORT_OFFSET
        front = router(plan, nodes, endpoints, port, opts.router_host)
        # A router-only host is a host of the render too: its files and its firewall.
        hosts.setdefault(front.host, HostRender(front.host, nodes[front.host].address, []))
    rendered = Rendered(list(hosts.values()), endpoints, modes)
    rendered.router = front
    return rendered

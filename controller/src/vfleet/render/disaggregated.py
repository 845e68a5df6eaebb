"""A disaggregated plan's two pools as engines, and the router in front of them.

The decode pool is the plan's top level and renders as any plan does; the prefill pool is
the same plan with the prefill pool's sizes, knobs and hosts (`prefill_plan`). Every engine
of either pool gets its release's `--kv-transfer-config` (vfleet.render.kv_transfer) and, on
each of its hosts, the NIXL side channel on that host's routable address with a block of
ports no other engine on the host uses, and UCX's transports from the host's probed HCAs
(TCP, said so, where it has none).

The router is `vllm-router` (the vLLM project's Rust router, PyPI `vllm-router`; its flags are
those of vllm-project/router `src/main.rs` CliArgs) in P/D mode: it sends each request to a
prefill engine, hands the returned transfer parameters to a decode engine, and streams the
decode engine's answer. It runs on the plan's router host as a systemd unit.
"""

from __future__ import annotations

from vfleet.catalog.flag_registry import FlagSet
from vfleet.catalog.kv_connectors import require_disaggregation
from vfleet.documents.plan import Plan
from vfleet.documents.render import check_extra_args
from vfleet.errors import UserError
from vfleet.render import kv_transfer
from vfleet.render.kv_transfer import Role, SideChannel
from vfleet.render.types import EngineOnHost, Flag, Placement, Router
from vfleet.topology.cluster import Node

SIDE_CHANNEL_BASE = 5600  # vLLM's default from 0.12; 5557 before clashed with KV events
ROUTER_PORT_OFFSET = 1000  # the router listens on the API base port + this
ROUTER_POLICY = "consistent_hash"  # one prompt prefix keeps meeting the same engines


def refuse_keyed_pools(
    key_source: str | None, remedy: str = "serve the pools without a key on a private network"
) -> None:
    """Refuse prefill/decode pools behind an API key. vllm-router 0.1 (the release pins.env
    names, checked) sends every engine `Authorization: Bearer ` with an empty token, whatever
    it is given (its --api-key, OPENAI_API_KEY, the client's own header), so engines holding
    a key answer HTTP 401 to every routed request; the router itself checks no client key."""
    if key_source:
        raise UserError(
            f"{key_source} with prefill/decode pools: vllm-router 0.1 sends the engines an "
            f"empty API key, so every routed request would get HTTP 401; {remedy}, or serve "
            "aggregated"
        )


def prefill_plan(plan: Plan) -> Plan:
    """The plan of the prefill pool: its sizes, knobs and hosts in the plan's own shape."""
    pools = plan.disaggregation
    assert pools is not None and pools.prefill is not None and pools.prefill_hosts
    p = pools.prefill
    return plan.model_copy(
        update={
            "layout": p.layout,
            "replicas": p.engines,
            "tensor_parallel_size": p.tensor_parallel_size,
            "pipeline_parallel_size": 1,
            "data_parallel_size": p.data_parallel_size,
            "enable_expert_parallel": p.enable_expert_parallel,
            "decode_context_parallel_size": 1,
            "max_num_seqs": p.max_num_seqs,
            "max_num_batched_tokens": p.max_num_batched_tokens,
            "hosts": pools.prefill_hosts,
            "disaggregation": None,
        }
    )


class SideChannelBook:
    """Each engine's side-channel block, the same base on every host it spans, no two
    engines' blocks overlapping on any host."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def take(self, hosts: list[str], ports: int) -> int:
        base = max(self._next.get(h, SIDE_CHANNEL_BASE) for h in hosts)
        for h in hosts:
            self._next[h] = base + ports
        return base


def _address(node: Node) -> str:
    if not node.address:
        raise UserError(
            f"host {node.name} has no address in the cluster spec: a prefill/decode engine's "
            "NIXL side channel must listen on a routable address, never localhost; add it"
        )
    return node.address


def connect(
    engines: list[EngineOnHost],
    placement: Placement,
    nodes: dict[str, Node],
    role: Role,
    plan: Plan,
    flags: FlagSet,
    book: SideChannelBook,
) -> None:
    """Give one pool engine (its per-host parts) the KV connector and its side channel."""
    version = plan.vllm_version
    require_disaggregation(version)
    if not flags.has("--kv-transfer-config"):
        raise UserError(
            f"the flag set for vLLM {flags.version} has no --kv-transfer-config: render with "
            "the release's own flags (vfleet plan --vllm-version)"
        )
    hosts = [host for host, _ in placement]
    ports = kv_transfer.side_channel_ports(
        version, plan.tensor_parallel_size, plan.data_parallel_size
    )
    base = book.take(hosts, ports)
    config = kv_transfer.kv_transfer_json(version, role)
    for (host, _), engine in zip(placement, engines, strict=True):
        node = nodes[host]
        channel = SideChannel(_address(node), base, ports)
        wiring = {
            **kv_transfer.side_channel_env(version, channel),
            **kv_transfer.ucx_env(list(node.ib_hcas)),
        }
        # What the operator set with --env (already in engine.env) wins, UCX_TLS for one.
        given = {key for key, _ in engine.env}
        engine.env += [(key, value) for key, value in wiring.items() if key not in given]
        engine.pool, engine.side_channel = role, (base, ports)
        if engine.runs_vllm:
            engine.flags.append(Flag("--kv-transfer-config", config, f"P/D: the {role} pool"))
            check_extra_args(engine.extra_args, flags, version, (f.name for f in engine.flags))


def router(
    plan: Plan,
    nodes: dict[str, Node],
    endpoints: list[dict[str, object]],
    port: int,
    host: str | None = None,
) -> Router:
    """The router's unit: P/D mode over every prefill and decode engine's API, on `host`
    (--router-host) or the plan's router host."""
    pools = plan.disaggregation
    assert pools is not None and pools.router_host is not None
    host = host or pools.router_host
    if host not in nodes:
        raise UserError(
            f"router host {host} is not in the cluster spec: name one of its hosts "
            f"({', '.join(sorted(nodes)[:8])})"
        )
    address = _address(nodes[host])
    prefill = [str(e["url"]).removesuffix("/v1") for e in endpoints if e.get("pool") == "prefill"]
    decode = [str(e["url"]).removesuffix("/v1") for e in endpoints if e.get("pool") == "decode"]
    argv = ["vllm-router", "--vllm-pd-disaggregation", "--policy", ROUTER_POLICY]
    for url in prefill:
        argv += ["--prefill", url]
    for url in decode:
        argv += ["--decode", url]
    argv += ["--host", address, "--port", str(port)]
    return Router(host, address, port, argv, prefill, decode)

"""Which ports each host's engines listen on, and who may reach them: `firewall.json`.

`vfleet render` writes it next to `endpoints.json`; the `firewall` role
(ansible/roles/firewall) opens, per host, the API ports to the configured client sources
and the intra-cluster ports only to the private addresses of the hosts that share an engine
with it. Everything else stays closed. Pure: a render in, a JSON-able dict out.

What listens, per launch mode (vLLM 0.8 to 0.33):

- every engine's head: the OpenAI API (`--port`), bound to the host's private address;
- mp: torch.distributed's store on the head (`--master-port`; TCPStore listens on every
  interface, hence the firewall);
- dp: the DP handshake on the head (`--data-parallel-rpc-port`, ZMQ on
  `--data-parallel-address`);
- ray: the GCS on the head (`ray start --port`) and, on every node, the raylet, the object
  manager, the agents and the worker ports, all pinned by the rendered unit (`RayPorts`);
  the dashboard stays on 127.0.0.1 and the Ray client server is never opened;
- every engine that spans hosts: NCCL's and Gloo's sockets, and vLLM's own ZMQ sockets
  between nodes (shm_broadcast's remote readers, the DP engines' inputs and outputs, the DP
  coordinator, the DP master ports, the executor's store) bind port 0, so the kernel picks
  them from `net.ipv4.ip_local_port_range`. None of them takes a port or a range: NCCL and
  Gloo have no such setting, and `VLLM_PORT` reaches only vLLM's `get_open_port()` callers,
  not the `tcp://<ip>:0` binds. So that range (`"ephemeral"`, the role reads each host's own)
  is opened to the engine's other hosts and to no one else. Over InfiniBand/RoCE, NCCL's data
  moves by RDMA and never meets netfilter; only its TCP bootstrap does.

Engines on one host (mode single) need no intra-cluster port at all, unless they belong to
a prefill/decode pool: then the NIXL side channel (a ZMQ block from
VLLM_NIXL_SIDE_CHANNEL_PORT) and the ephemeral range (UCX over TCP, and its bootstrap over
RDMA) open to every host of both pools, and the router host reaches every pool engine's API;
the router's own port is an API port for the client sources.
"""

from __future__ import annotations

from typing import Any

# The render's types only: the engine render never imports this module, and
# vfleet.render.file_set composes the two.
from vfleet.render.types import EngineOnHost, Rendered, RenderOptions

FORMAT = 1
EPHEMERAL = "ephemeral"  # the host's net.ipv4.ip_local_port_range


def _port(engine: str, ports: int | tuple[int, int] | str, why: str) -> dict[str, str]:
    text = f"{ports[0]}-{ports[1]}" if isinstance(ports, tuple) else str(ports)
    return {"engine": engine, "ports": text, "why": why}


def _cluster_ports(engine: EngineOnHost, opts: RenderOptions) -> list[dict[str, str]]:
    """Intra-cluster ports this host listens on for one engine that spans hosts."""
    out: list[dict[str, str]] = []
    head = engine.role in ("head", "ray-head")
    if engine.mode == "mp" and head and engine.master_port is not None:
        out.append(_port(engine.id, engine.master_port, "torch.distributed store (--master-port)"))
    if engine.mode == "dp" and head and engine.dp_rpc_port is not None:
        out.append(_port(engine.id, engine.dp_rpc_port, "DP handshake (--data-parallel-rpc-port)"))
    if engine.mode == "ray":
        if head:
            out.append(_port(engine.id, opts.ray_port, "Ray GCS (ray start --port)"))
        out += _ray_ports(engine, opts)
    out.append(
        _port(
            engine.id,
            EPHEMERAL,
            "NCCL, Gloo and vLLM's ZMQ sockets between nodes bind port 0 (no flag pins them)",
        )
    )
    return out


def _ray_ports(engine: EngineOnHost, opts: RenderOptions) -> list[dict[str, str]]:
    """The ports every Ray node listens on, as the rendered unit pins them."""
    ray = opts.ray_ports
    return [
        _port(engine.id, ray.node_manager, "Ray raylet (--node-manager-port)"),
        _port(engine.id, ray.object_manager, "Ray object manager (--object-manager-port)"),
        _port(engine.id, ray.runtime_env_agent, "Ray runtime env agent (--runtime-env-agent-port)"),
        _port(
            engine.id,
            ray.dashboard_agent_grpc,
            "Ray dashboard/metrics agent gRPC (--dashboard-agent-grpc-port)",
        ),
        _port(engine.id, ray.metrics_export, "Ray metrics (--metrics-export-port)"),
        _port(
            engine.id,
            ray.dashboard_agent_listen,
            "Ray dashboard agent HTTP (--dashboard-agent-listen-port)",
        ),
        _port(
            engine.id,
            (ray.min_worker, ray.max_worker),
            "Ray workers (--min-worker-port/--max-worker-port)",
        ),
    ]


def exposure(rendered: Rendered, opts: RenderOptions) -> dict[str, Any]:
    """firewall.json: per host, the API ports (for the client sources) and the intra-cluster
    ports with the peers that may reach them."""
    addresses = {h.name: h.address for h in rendered.hosts}
    spans = {e["engine"]: list(e["hosts"]) for e in rendered.endpoints}
    pool_hosts = [h.name for h in rendered.hosts if any(e.pool for e in h.engines)]
    hosts: dict[str, Any] = {}
    for host in rendered.hosts:
        api: list[dict[str, Any]] = []
        cluster: list[dict[str, str]] = []
        peers: set[str] = set()
        router = rendered.router
        if router is not None and router.host == host.name:
            api.append({"engine": "router", "port": router.port})
        for engine in host.engines:
            if engine.port is not None:
                api.append({"engine": engine.id, "port": engine.port})
            if engine.side_channel is not None:
                first, count = engine.side_channel
                ports = first if count == 1 else (first, first + count - 1)
                cluster.append(_port(engine.id, ports, "NIXL side channel (P/D handshake)"))
                cluster.append(_port(engine.id, EPHEMERAL, "NIXL transfers over UCX"))
                peers.update(a for h in pool_hosts if h != host.name and (a := addresses[h]))
                if router is not None and router.host != host.name:
                    peers.add(router.address)
            others = [h for h in spans.get(engine.id, [host.name]) if h != host.name]
            if not others:
                continue
            cluster += _cluster_ports(engine, opts)
            peers.update(a for h in others if (a := addresses.get(h)))
        hosts[host.name] = {
            "address": host.address,
            "api": api,
            "cluster": cluster,
            "peers": sorted(peers),
        }
    return {
        "format": FORMAT,
        "generated_by": "vfleet render",
        "ephemeral": "the host's net.ipv4.ip_local_port_range",
        "hosts": hosts,
    }

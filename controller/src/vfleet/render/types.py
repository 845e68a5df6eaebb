"""The render's data: its options and the typed engines it places on each host.

A module of its own so that everything downstream of a render (the file writer, the
firewall, tests) can read these types without importing the code that computes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The plan's ranks on one host ({"gpu": 0, "dp_rank": 0, ...}), and a replica's hosts in order.
Rank = dict[str, Any]
Placement = list[tuple[str, list[Rank]]]


@dataclass(frozen=True)
class RayPorts:
    """Ray's listening ports besides the GCS (`RenderOptions.ray_port`). Ray picks most of
    them at random unless told; pinned here so that the firewall can name them, and kept
    below the kernel's ephemeral range (32768-60999 by default) so that no socket bound to
    port 0 takes one first (Ray's own default agent port, 52365, sits inside it)."""

    node_manager: int = 6380
    object_manager: int = 6381
    runtime_env_agent: int = 6382
    dashboard_agent_grpc: int = 6383
    metrics_export: int = 6384
    dashboard_agent_listen: int = 6385
    min_worker: int = 10002
    max_worker: int = 10999
    client_server: int = 10001  # head only; never opened by the firewall
    dashboard: int = 8265  # head only, on 127.0.0.1


@dataclass(frozen=True)
class RenderOptions:
    model_path: str
    served_model_name: str
    vllm_bin: str = "/opt/vfleet/vllm/bin/vllm"
    ray_bin: str = "/opt/vfleet/vllm/bin/ray"
    port: int = 8000
    master_port: int = 29501
    dp_rpc_port: int = 13345
    ray_port: int = 6379
    ray_ports: RayPorts = field(default_factory=RayPorts)
    backend: str = "auto"  # auto | mp | ray
    all2all_backend: str = "allgather_reducescatter"
    api_key_file: str | None = None
    install_dir: str = "/etc/vfleet"
    service_user: str = "vllm"
    # The service user's home: the only place the hardened units may write (caches).
    service_home: str = "/var/lib/vllm"
    extra_args: tuple[str, ...] = ()
    extra_env: tuple[tuple[str, str], ...] = ()
    plan_name: str = "plan.json"
    draft_model_path: str | None = None  # EAGLE draft on the hosts (default /srv/models/<name>)


@dataclass
class Flag:
    name: str
    value: str | None = None
    why: str = ""

    def argv(self) -> list[str]:
        return [self.name] if self.value is None else [self.name, self.value]


@dataclass
class EngineOnHost:
    id: str  # unique per host, e.g. "engine-0" or "engine-0-node1"
    replica: str
    role: str  # single | head | follower | ray-head | ray-worker
    mode: str
    flags: list[Flag] = field(default_factory=list)
    env: list[tuple[str, str]] = field(default_factory=list)
    extra_args: tuple[str, ...] = ()
    port: int | None = None  # the API port, on engines that serve one
    runs_vllm: bool = True
    # The bootstrap ports the mode gives vLLM (mp: --master-port, dp: --data-parallel-rpc-port),
    # kept typed so that the firewall need not parse them back out of the flags.
    master_port: int | None = None
    dp_rpc_port: int | None = None

    def argv(self, opts: RenderOptions) -> list[str]:
        out = [opts.vllm_bin, "serve", opts.model_path]
        for flag in self.flags:
            out += flag.argv()
        return out + list(self.extra_args)


@dataclass
class HostRender:
    name: str
    address: str | None
    engines: list[EngineOnHost]
    files: dict[str, str] = field(default_factory=dict)


@dataclass
class Rendered:
    hosts: list[HostRender]
    endpoints: list[dict[str, Any]]
    mode_by_replica: dict[str, str]

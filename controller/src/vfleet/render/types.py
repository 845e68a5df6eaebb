"""The render's data: its options (vfleet.documents.render) and the typed engines it places on
each host.

A module of its own so that everything downstream of a render (the file writer, the
firewall, tests) can read these types without importing the code that computes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The plan's ranks and the render's options live with their checks; downstream code reads
# them from here.
from vfleet.documents.placement import Rank
from vfleet.documents.render import RayPorts, RenderOptions

__all__ = [
    "EngineOnHost",
    "Flag",
    "HostRender",
    "Placement",
    "Rank",
    "RayPorts",
    "RenderOptions",
    "Rendered",
    "Router",
]

# A replica's hosts in order, each with the plan's ranks on it.
Placement = list[tuple[str, list[Rank]]]


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
    # A P/D pool engine's pool and NIXL side-channel block (first port, count).
    pool: str | None = None
    side_channel: tuple[int, int] | None = None

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


@dataclass(frozen=True)
class Router:
    """The P/D router of a disaggregated plan (vfleet.render.disaggregated)."""

    host: str
    address: str
    port: int
    argv: list[str]
    prefill_urls: list[str]
    decode_urls: list[str]


@dataclass
class Rendered:
    hosts: list[HostRender]
    endpoints: list[dict[str, Any]]
    mode_by_replica: dict[str, str]
    router: Router | None = None

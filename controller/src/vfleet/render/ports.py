"""Who gets which port, per host, across all the engines of one render.

Engines headed on one host must not share an API port, a torch.distributed bootstrap port
or a DP handshake port, and Ray's pinned ports allow one Ray cluster per host: one book,
shared by every launch mode, hands them out in plan order so the output is stable.
"""

from __future__ import annotations

from collections.abc import Iterable

from vfleet.errors import UserError
from vfleet.render.types import RenderOptions


class PortBook:
    def __init__(self, hosts: Iterable[str], opts: RenderOptions) -> None:
        names = list(hosts)
        self._api = {name: opts.port for name in names}
        self._master = {name: opts.master_port for name in names}
        self._rpc = {name: opts.dp_rpc_port for name in names}
        self._ray: dict[str, str] = {}  # host -> the engine whose Ray cluster it runs

    @staticmethod
    def _take(counter: dict[str, int], host: str) -> int:
        port = counter[host]
        counter[host] += 1
        return port

    def api(self, head: str) -> int:
        """The next API port on the engine's head (every engine takes one)."""
        return self._take(self._api, head)

    def master(self, head: str) -> int:
        """The next --master-port on the head (mp engines)."""
        return self._take(self._master, head)

    def dp_rpc(self, head: str) -> int:
        """The next --data-parallel-rpc-port on the head (dp engines)."""
        return self._take(self._rpc, head)

    def claim_ray(self, hosts: Iterable[str], engine_id: str) -> None:
        """Ray's ports are pinned (RayPorts), so a host can run one Ray cluster only."""
        for host in hosts:
            if host in self._ray:
                raise UserError(
                    f"host {host} would run two Ray clusters (engines "
                    f"{self._ray[host]} and {engine_id}), whose pinned ports "
                    "collide: use --backend mp (vLLM 0.11.1 or later) or re-plan"
                )
            self._ray[host] = engine_id

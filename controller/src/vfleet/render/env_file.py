"""The environment every engine gets: its GPUs, the NCCL/Gloo interfaces, quiet defaults.

Kept apart from the launch modes because `--env` checking needs the full list of names
vfleet sets (`vfleet_env_names`), and that list is taken from this same code.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Protocol

from vfleet.render.types import RenderOptions

QUIET_ENV = (("HF_HUB_OFFLINE", "1"), ("VLLM_NO_USAGE_STATS", "1"), ("DO_NOT_TRACK", "1"))
ALL2ALL_ENV = "VLLM_ALL2ALL_BACKEND"  # before vLLM 0.11.1's --all2all-backend
LAUNCH_ENV = ("VLLM_BIN", "VLLM_API_KEY")  # launch.sh reads or sets them


class NetworkNode(Protocol):
    """What the environment reads of a cluster node (vfleet.topology.cluster.Node has it)."""

    @property
    def address(self) -> str | None: ...
    @property
    def bootstrap_interface(self) -> str | None: ...
    @property
    def ib_hcas(self) -> tuple[str, ...]: ...
    @property
    def roce_gid_index(self) -> int | None: ...


def network_env(node: NetworkNode, multi_node: bool, fabric: str) -> list[tuple[str, str]]:
    env: list[tuple[str, str]] = []
    if node.address:
        env.append(("VLLM_HOST_IP", node.address))
    if node.bootstrap_interface:
        env += [
            ("NCCL_SOCKET_IFNAME", node.bootstrap_interface),
            ("GLOO_SOCKET_IFNAME", node.bootstrap_interface),
        ]
    if multi_node and node.ib_hcas and fabric in ("infiniband", "roce"):
        env.append(("NCCL_IB_HCA", ",".join(node.ib_hcas)))
        if fabric == "roce" and node.roce_gid_index is not None:
            env.append(("NCCL_IB_GID_INDEX", str(node.roce_gid_index)))
    return env


def engine_env(
    node: NetworkNode, multi: bool, fabric: str, gpus: list[int], opts: RenderOptions
) -> list[tuple[str, str]]:
    env = [("CUDA_VISIBLE_DEVICES", ",".join(str(g) for g in sorted(gpus)))]
    env += network_env(node, multi, fabric)
    env += list(QUIET_ENV)
    return env + list(opts.extra_env)


@dataclass(frozen=True)
class _EveryProbeField:
    address: str | None = "10.0.0.1"
    bootstrap_interface: str | None = "eth0"
    ib_hcas: tuple[str, ...] = ("mlx5_0",)
    roce_gid_index: int | None = 3


@cache
def vfleet_env_names() -> frozenset[str]:
    """Every variable vfleet sets for some engine: `--env` may not override them. Taken
    from the code that sets them, fed a node that has every probe field."""
    node = _EveryProbeField()
    opts = RenderOptions(model_path="/m", served_model_name="m")
    names = {key for key, _ in engine_env(node, True, "roce", [0], opts)}
    return frozenset(names | {ALL2ALL_ENV, *LAUNCH_ENV})

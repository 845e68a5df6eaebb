"""What a prefill or decode engine of a disaggregated plan is launched with, per vLLM release:
its `--kv-transfer-config` JSON and the NIXL side channel's environment.

vLLM's `KVTransferConfig` changed shape from release to release (docs/pd-disaggregation.md
has the table, with sources): `kv_role` became required with a connector in 0.9.2;
`kv_load_failure_policy` appeared in 0.13 (0.12 lacks it); by 0.17 the config refuses
unknown keys (0.13 still drops them silently); the NIXL abort timeout (an environment
variable) became a lease in the connector's extra config in 0.22 and the variable was gone
by 0.26; 0.32 removed the V0-era `kv_buffer_size`, `kv_rank`, `kv_parallel_size` and
`kv_ip`. vfleet writes only the fields the target release has, and never the V0 ones. The
side channel's default port moved from 5557 (which clashed with the KV-events port) to 5600
in 0.12, and the ports one engine takes from tp x dp to one per DP rank.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from vfleet.catalog.kv_connectors import (
    ABORT_TIMEOUT_FROM,
    CONNECTOR,
    LEASE_FROM,
    LOAD_FAILURE_POLICY_FROM,
    PORT_PER_DP_RANK_FROM,
    require_disaggregation,
)
from vfleet.catalog.releases import parse_version

Role = Literal["prefill", "decode"]
LEASE_SECONDS = 30  # vLLM's default lease; a heartbeat renews it at two thirds
ABORT_TIMEOUT_S = 480  # 0.12's default (120 before): a decode engine slow to pull keeps its KV


@dataclass(frozen=True)
class SideChannel:
    """The NIXL handshake listener of one engine: its host and the ports it takes."""

    host: str  # the engine host's routable address; vLLM's default, localhost, fails across hosts
    base_port: int
    ports: int  # how many consecutive ports from base_port the engine's ranks bind


def kv_transfer_config(version: str, role: Role) -> dict[str, object]:
    """The `--kv-transfer-config` of one engine, with the fields `version` accepts."""
    require_disaggregation(version)
    v = parse_version(version)
    # NIXL does not act on kv_role (the router decides who prefills), but the field is
    # required with a connector and says in `ps` output which pool an engine belongs to.
    config: dict[str, object] = {
        "kv_connector": CONNECTOR,
        "kv_role": "kv_producer" if role == "prefill" else "kv_consumer",
    }
    if v >= LOAD_FAILURE_POLICY_FROM:
        # A decode engine that cannot pull the KV fails the request instead of recomputing
        # the prompt: recompute hides a broken transfer as latency.
        config["kv_load_failure_policy"] = "fail"
    if v >= LEASE_FROM:
        config["kv_connector_extra_config"] = {"kv_lease_duration": LEASE_SECONDS}
    return config


def kv_transfer_json(version: str, role: Role) -> str:
    """The config as one JSON line, as it goes after `--kv-transfer-config`."""
    return json.dumps(kv_transfer_config(version, role), separators=(",", ":"), sort_keys=True)


def side_channel_ports(version: str, tp: int, dp: int) -> int:
    """Ports one engine's side channel takes: one per rank before 0.12, one per DP rank from
    it (base + dp_rank, the TP workers sharing it)."""
    if parse_version(version) >= PORT_PER_DP_RANK_FROM:
        return dp
    return tp * dp


def side_channel_env(version: str, channel: SideChannel) -> dict[str, str]:
    """The environment of one engine's side channel for `version`."""
    env = {
        "VLLM_NIXL_SIDE_CHANNEL_HOST": channel.host,
        "VLLM_NIXL_SIDE_CHANNEL_PORT": str(channel.base_port),
    }
    v = parse_version(version)
    if ABORT_TIMEOUT_FROM <= v < LEASE_FROM:
        env["VLLM_NIXL_ABORT_REQUEST_TIMEOUT"] = str(ABORT_TIMEOUT_S)
    return env


def ucx_env(rdma_devices: list[str]) -> dict[str, str]:
    """UCX's transports for NIXL: the probed HCAs where there is RDMA, TCP where not (NCCL's
    NCCL_IB_HCA does not reach NIXL)."""
    if rdma_devices:
        return {
            "UCX_TLS": "rc,ud,sm,self,cuda_copy,cuda_ipc",
            "UCX_NET_DEVICES": ",".join(f"{dev}:1" for dev in rdma_devices),
        }
    return {"UCX_TLS": "tcp,sm,self,cuda_copy,cuda_ipc"}

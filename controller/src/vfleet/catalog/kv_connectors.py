"""Which vLLM releases can run prefill and decode on separate engines, and the release
boundaries that change how a disaggregated engine is launched (docs/pd-disaggregation.md has
the table with its sources: each release's `KVTransferConfig`, its connector registry and its
environment variables, read from the release wheels)."""

from __future__ import annotations

from vfleet.catalog.releases import parse_version
from vfleet.errors import UserError

CONNECTOR = "NixlConnector"
FIRST_NIXL = (0, 9, 2)  # the first release checked with NixlConnector registered
ABORT_TIMEOUT_FROM = (0, 10, 1)  # VLLM_NIXL_ABORT_REQUEST_TIMEOUT exists (gone by 0.26)
PORT_PER_DP_RANK_FROM = (0, 12, 0)  # side-channel ports: base + dp_rank (tp x dp before)
LOAD_FAILURE_POLICY_FROM = (0, 13, 0)  # KVTransferConfig.kv_load_failure_policy (not in 0.12)
LEASE_FROM = (0, 22, 0)  # kv_connector_extra_config.kv_lease_duration replaces the timeout


def supports_disaggregation(version: str) -> bool:
    return parse_version(version) >= FIRST_NIXL


def require_disaggregation(version: str) -> None:
    if not supports_disaggregation(version):
        raise UserError(
            f"vLLM {version} has no {CONNECTOR} (vfleet renders P/D from 0.9.2): upgrade the "
            "release or plan with --mode aggregated"
        )

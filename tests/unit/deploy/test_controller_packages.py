"""What the local site's wheelhouse holds beside the vLLM CPU build: NIXL and the router only
where the serving mode may plan prefill/decode pools (a P/D deploy failed to install without
them), each at the version pins.env names."""

from __future__ import annotations

import shutil

import pytest

from support.bundles import deploy_context
from support.paths import REPO
from vfleet.deploy.flow import serving_mode
from vfleet.deploy.pipeline import controller_extra_packages
from vfleet.environment.pins import pins
from vfleet.errors import UserError


def _context(tmp_path, mode: str | None):
    ctx = deploy_context(tmp_path, {})
    shutil.copy(REPO / "pins.env", ctx.root / "pins.env")
    if mode is not None:
        ctx.group_vars["vfleet_serving_mode"] = mode
    return ctx


@pytest.mark.parametrize("mode", ["disaggregated", "auto"])
def test_a_mode_that_may_plan_pools_gets_nixl_and_the_router_at_their_pins(tmp_path, mode):
    pinned = pins(REPO)
    assert controller_extra_packages(_context(tmp_path, mode)) == [
        f"nixl=={pinned['NIXL_VERSION']}",
        f"vllm-router=={pinned['VLLM_ROUTER_VERSION']}",
    ]


@pytest.mark.parametrize("mode", [None, "aggregated"])
def test_aggregated_serving_adds_nothing(tmp_path, mode):
    assert controller_extra_packages(_context(tmp_path, mode)) == []


def test_an_unknown_mode_is_refused_before_anything_is_installed(tmp_path):
    with pytest.raises(UserError, match="use auto, aggregated or disaggregated"):
        controller_extra_packages(_context(tmp_path, "both"))


def test_auto_behind_an_api_key_serves_aggregated(tmp_path):
    """Pools cannot sit behind a key (vllm-router 0.1 hands the engines an empty one), so
    `auto` with a key plans aggregated and the wheelhouse needs nothing more."""
    ctx = _context(tmp_path, "auto")
    key = tmp_path / "api-key"
    key.write_text("k")
    ctx.api_key_file = key
    assert serving_mode(ctx) == "aggregated" and controller_extra_packages(ctx) == []
    ctx.api_key_file = None
    assert serving_mode(ctx) == "auto"

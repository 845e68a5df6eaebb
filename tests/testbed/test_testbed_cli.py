"""`testbed` input checks and profile data: no root, no hosts needed."""

from __future__ import annotations

import pytest

from vfleet_testbed import cli
from vfleet_testbed.profiles import PROFILES, SHAPES, fixtures_root


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["up", "0", "--profile", "h100-sxm-8gpu"], "N must be at least 1"),
        (["up", "-3", "--profile", "h100-sxm-8gpu"], "N must be at least 1"),
        (["up", "2", "--profile", "a100-9gpu"], "unknown profile 'a100-9gpu'"),
        (["up", "2", "--profile", "h200-1gpu,a100-9gpu"], "unknown profile 'a100-9gpu'"),
        (["up", "3", "--profile", "h200-1gpu,l40s-pcie-8gpu"], "lists 2 profiles for N=3"),
        (["up", "2", "--profile", "h200-1gpu", "--shape", "token-ring"], "unknown shape"),
        (["up", "two", "--profile", "h200-1gpu"], "invalid int value"),
        (["up", "2"], "--profile"),
        (["up", "2", "--profile", "h200-1gpu", "--name", "Bad.Name"], "bad name"),
        (["up", "2", "--profile", "h200-1gpu", "--hosts", "a"], "lists 1 names for N=2"),
        (["up", "2", "--profile", "h200-1gpu", "--hosts", "a,hub"], "bad host name 'hub'"),
        (["down", "--name", "x/y"], "bad name"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert says in err


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_profile_has_its_recorded_host(profile: str) -> None:
    p = PROFILES[profile]
    fixture = fixtures_root() / p.fixture
    xml = (fixture / "nvidia-smi-q.xml").read_text()
    assert xml.count(f"<product_name>{p.gpu}</product_name>") == p.gpus
    assert (fixture / "probe-sysfs.json").is_file()
    assert p.shape in SHAPES
    assert (fixtures_root() / "nvidia-smi-standin").is_file()


def test_shapes_keep_the_fabric_ratio() -> None:
    eth, ib = SHAPES["ethernet"].rate_mbit, SHAPES["infiniband"].rate_mbit
    assert eth and ib and ib == 8 * eth
    assert SHAPES["none"].rate_mbit is None

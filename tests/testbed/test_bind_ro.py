"""`testbed up --bind-ro SRC[:DST]`: controller paths bound read-only into every host.

The input checks and the nspawn command line need nothing; the last test boots one host for
real (marker `testbed`: skips without root and nspawn, fails under CI=true).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from vfleet_testbed import base, cli, machines


@pytest.mark.parametrize(
    ("bind", "says"),
    [
        ("relative/dir", "must be absolute"),
        ("/etc:relative", "must be absolute"),
        ("/nonexistent-vfleet-bind", "does not exist"),
        ("/etc:/a:/b", "paths without ':'"),
        ("/etc:", "paths without ':'"),
        ("/etc:/", "overlaps"),
        (f"/etc:{base.GPU_MOUNT}", "overlaps"),
        (f"/etc:{base.GPU_MOUNT}/x", "overlaps"),
        ("/etc:/opt/vfleet", "overlaps"),
    ],
)
def test_bad_binds_exit_2_with_one_line(
    bind: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["up", "1", "--profile", "h200-1gpu", "--bind-ro", bind]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert says in err


def test_two_binds_on_one_target_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["up", "1", "--profile", "h200-1gpu", "--bind-ro", "/etc:/x", "--bind-ro", "/usr:/x"]
    assert cli.main(argv) == 2
    assert "already targets /x" in capsys.readouterr().err


def test_binds_are_normalised_and_reach_nspawn(tmp_path: Path) -> None:
    binds = machines.parse_bind_ro([f"{tmp_path}/./a/..", f"{tmp_path}:/srv/data/"])
    assert binds == [f"{tmp_path}:{tmp_path}", f"{tmp_path}:/srv/data"]
    tb = machines.Testbed(
        name="t",
        profile="h200-1gpu",
        shape="none",
        rate_mbit=None,
        state_dir="/run/vfleet-testbed/t",
        image="/img",
        key="/key",
        hub_netns="hub",
        controller_netns="ctl",
        controller_address="10.213.0.2",
        inventory="/inv",
        ssh_config="/ssh",
        proxy="/proxy",
        bind_ro=binds,
    )
    host = machines.Host("h1", "10.213.0.11", "ns", "t-h1", "/log")
    argv = machines._nspawn_argv(tb, host)
    wanted = [f"--bind-ro={b}" for b in binds]
    gpu = f":{base.GPU_MOUNT}"
    assert [a for a in argv if a.startswith("--bind-ro=") and not a.endswith(gpu)] == wanted
    # The GPU fixture bound is the host's own profile's (one staged folder per profile).
    assert f"--bind-ro=/run/vfleet-testbed/t/gpu/h200-1gpu{gpu}" in argv
    # The state written by an older testbed (no bind_ro key) still loads.
    data = tb.to_json()
    del data["bind_ro"]
    assert machines.Testbed.from_json(data).bind_ro == []


@pytest.mark.testbed
def test_a_bound_directory_is_readable_and_read_only_in_the_host(
    testbed_cli: Path, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "hello.txt").write_text("from the controller\n")
    name = f"pytest-bind-{os.getpid()}"
    binds = ["--bind-ro", str(shared), "--bind-ro", f"{shared}:/srv/elsewhere"]
    proc = subprocess.run(
        [str(testbed_cli), "up", "1", "--profile", "h200-1gpu", "--name", name, "--json", *binds],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    state = json.loads(proc.stdout)
    try:
        assert state["bind_ro"] == [f"{shared}:{shared}", f"{shared}:/srv/elsewhere"]
        script = (
            f"cat {shared}/hello.txt /srv/elsewhere/hello.txt; "
            f"touch {shared}/new 2>/dev/null && echo WRITABLE || echo READ-ONLY"
        )
        out = subprocess.run(
            ["ssh", "-F", state["ssh_config"], "h1", script],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert out.stdout.splitlines() == [
            "from the controller",
            "from the controller",
            "READ-ONLY",
        ], out.stdout + out.stderr
        assert not (shared / "new").exists()
        status = json.loads(
            subprocess.run(
                [str(testbed_cli), "status", "--name", name, "--json"],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout
        )
        assert status[0]["bind_ro"] == state["bind_ro"]
    finally:
        down = subprocess.run(
            [str(testbed_cli), "down", "--name", name],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert down.returncode == 0, down.stderr
    assert (shared / "hello.txt").read_text() == "from the controller\n"

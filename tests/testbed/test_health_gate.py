"""The health gate on real test hosts: three machines probed by the topology_probe role,
one whose stand-in driver reports Xid 79 (a real capture's line in its kernel log) and one
whose link is shaped to a tenth of the others both ways (a NIC that came up slow). The plan
must leave both out, on the one healthy host, and the report must say why."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.booted import booted, ssh
from support.bundles import deploy_context
from support.paths import DATA, REPO
from vfleet.deploy import flow
from vfleet.health import probed as health_probed

pytestmark = pytest.mark.testbed

NAME = f"pytest-hg-{os.getpid()}"
XID_LOG = DATA / "health" / "kernel-xid.log"
STANDIN_KERNEL_LOG = "/var/log/nvidia-standin/kernel.log"
PLAY = """
- name: Probe the test hosts
  hosts: gpu_hosts
  gather_facts: false
  roles:
    - role: topology_probe
"""


@pytest.fixture(scope="module")
def bed(testbed_cli):
    with booted(testbed_cli, 3, NAME) as described:
        yield described


def _probe(bed: dict, facts: Path, play: Path) -> None:
    """The topology_probe role over the three hosts, as `make probe` runs it."""
    play.write_text(PLAY)
    extra = {
        "topology_probe_facts_dir": str(facts),
        "topology_probe_iperf3": True,
        "topology_probe_kernel_log": STANDIN_KERNEL_LOG,
        "topology_probe_timeout_s": 120,
    }
    env = dict(
        os.environ,
        ANSIBLE_ROLES_PATH=str(REPO / "ansible" / "roles"),
        ANSIBLE_HOST_KEY_CHECKING="False",
    )
    out = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            *("-i", bed["inventory"], "-e", json.dumps(extra), str(play)),
        ],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]


def test_the_plan_leaves_out_the_host_with_an_xid_and_the_one_whose_link_is_slow(
    bed, tmp_path, capsys
):
    from vfleet_testbed import network

    xid79 = [line for line in XID_LOG.read_text().splitlines() if "): 79," in line]
    rc, out = ssh(bed, "h2", f"cat >> {STANDIN_KERNEL_LOG}", stdin="\n".join(xid79) + "\n")
    assert rc == 0, out
    network.shape(NAME, "h3", bed["rate_mbit"] // 10, both_ways=True)
    facts = tmp_path / "facts"
    _probe(bed, facts, tmp_path / "probe.yml")

    ctx = deploy_context(tmp_path, {})
    shutil.rmtree(ctx.artifacts / "facts")
    shutil.copytree(facts, ctx.artifacts / "facts")
    probed = health_probed.probed_cluster(ctx, "deploy", allow_partial=False)
    printed = capsys.readouterr().out
    print(printed)
    assert sorted(probed.left_out) == ["h2", "h3"], printed
    assert "xid: Xid 79 on PCI:0000:9a:00 (GPU has fallen off the bus)" in probed.why["h2"]
    assert "iperf3: " in probed.why["h3"] and "slow both ways" in probed.why["h3"]
    checks = {v.host: {c.name: c for c in v.checks} for v in probed.verdicts}
    # The healthy host's run in came from h3: it passes, naming the slow end.
    assert checks["h1"]["iperf3"].verdict == "pass", checks["h1"]["iperf3"]
    assert "the slow end is h3" in checks["h1"]["iperf3"].evidence
    assert checks["h1"]["xid"].verdict == "pass"  # the stand-in's log was read: no Xid

    result = flow.plan(ctx, probed.cluster)
    assert result.plan.replicas == 1  # h1's GPU alone
    rendered = flow.render(ctx, result.plan, probed.cluster)
    assert [e["hosts"] for e in rendered.endpoints] == [["h1"]]
    flow.write_report(ctx, result, rendered.endpoints, probed.cluster, probed)
    section = (ctx.artifacts / "report" / "report.md").read_text().split("## Health gate")[1]
    section = section.split("\n## ")[0]
    assert "| h2 | xid | fail |" in section and "| h3 | iperf3 | fail |" in section
    assert "h2 left out of the plan: failed the health gate (xid: Xid 79" in section
    assert "h3 left out of the plan: failed the health gate (iperf3: " in section

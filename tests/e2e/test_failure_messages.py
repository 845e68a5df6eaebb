"""What `make deploy` tells the operator when a phase fails: a real ansible-playbook run
through vfleet.environment.commands.run, whose results callback
(ansible/plugins/callback/vfleet_results.py) records each host's outcome, on local "hosts"
and one that cannot be reached. Fast (a few seconds): no test hosts; the fault tests check
the same lines on real ones."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from support.ci_gate import require
from support.paths import REPO
from vfleet.environment import commands
from vfleet.environment.commands import UNREACHABLE_ADVICE, PhaseFailed, host_failures
from vfleet.environment.context import Context

LOCAL = {
    "ansible_connection": "local",
    "ansible_python_interpreter": "{{ ansible_playbook_python }}",
}
INVENTORY = {
    "all": {
        "hosts": {
            "fine": LOCAL,
            "disk": LOCAL,
            "pip": LOCAL,
            "looped": LOCAL,
            "recovered": LOCAL,
            "rescued": LOCAL,
            "cleaned": LOCAL,
            # Nothing listens on port 1: refused at once, no timeout to wait out.
            "gone": {
                "ansible_host": "127.0.0.2",
                "ansible_port": 1,
                "ansible_connection": "ssh",
                "ansible_ssh_common_args": "-o ConnectTimeout=1",
            },
        }
    }
}

# One task per failure shape the roles produce: the vllm role's free-space assert (a folded
# fail_msg), a pip install's stderr, a loop, a rescue that recovers, a rescue's closing fail,
# and an `always` whose clean-up fails too, ignored.
PLAYBOOK = """\
- name: Fail in every way the roles do
  hosts: all
  gather_facts: false
  tasks:
    - name: Pass everywhere.
      ansible.builtin.command: "true"
      changed_when: false

    - name: Fail, ignored.
      ansible.builtin.command: "false"
      changed_when: false
      ignore_errors: true

    - name: Check that the virtualenv's filesystem has room for vLLM.
      ansible.builtin.assert:
        that: inventory_hostname != 'disk'
        fail_msg: >-
          No space left for vLLM on {{ inventory_hostname }}: /opt/vfleet/vllm has
          4 MiB free and the install needs 3072 MiB (vllm_min_free_mb). Free space there
          or put vllm_venv on a larger disk, then re-run.
        quiet: true

    - name: Install vLLM.
      ansible.builtin.shell: >-
        echo 'Collecting vllm' >&2;
        echo 'ERROR: Could not install packages due to an OSError:'
        '[Errno 28] No space left on device' >&2;
        echo >&2; exit 1
      changed_when: false
      when: inventory_hostname == 'pip'

    - name: Wait for each engine.
      ansible.builtin.fail:
        msg: "{{ item }} did not answer"
      loop: [engine-0, engine-1]
      when: inventory_hostname == 'looped' and item == 'engine-1'

    - name: Recover, or explain.
      when: inventory_hostname in ['recovered', 'rescued']
      block:
        - name: Wait until each engine answers /health.
          ansible.builtin.fail:
            msg: "Status code was -1 and not [200]: Request failed"
      rescue:
        - name: Fail with the reason the engines did not come up.
          ansible.builtin.fail:
            msg: "{{ ansible_failed_task.name }} failed on {{ inventory_hostname }}"
          when: inventory_hostname == 'rescued'

    - name: Clean up after a failure.
      when: inventory_hostname == 'cleaned'
      block:
        - name: Start the engine.
          ansible.builtin.fail:
            msg: the engine did not start
      always:
        - name: Remove the scratch files.
          ansible.builtin.command: "false"
          changed_when: false
          ignore_errors: true
"""


def _bundle(root: Path) -> Path:
    """`root` as a bundle whose ansible/ is the repository's: its config and the results
    callback the runs load from there."""
    (root / "ansible").symlink_to(REPO / "ansible")
    return root


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[PhaseFailed, Path]:
    playbook = Path(sys.executable).parent / "ansible-playbook"
    require(playbook.is_file(), f"no {playbook}: install the controller's ops extra")
    require(shutil.which("ssh") is not None, "no ssh client for the unreachable host")
    root = tmp_path_factory.mktemp("run")
    (root / "hosts.yml").write_text(json.dumps(INVENTORY))
    (root / "play.yml").write_text(PLAYBOOK)
    ctx = Context("local", _bundle(root))
    argv = [str(playbook), "-i", str(root / "hosts.yml"), str(root / "play.yml")]
    with pytest.raises(PhaseFailed) as caught:
        commands.run(ctx, "install", argv, "play", ansible=True)
    return caught.value, ctx.artifacts / "logs" / "play.results.json"


def _outcomes(results: Path) -> dict[str, Any]:
    return json.loads(results.read_text())["hosts"]


def test_the_callback_records_each_hosts_status_task_and_recap(failed_run):
    _, results = failed_run
    outcomes = _outcomes(results)
    assert {host: o["status"] for host, o in outcomes.items()} == {
        "fine": "ok",
        "disk": "failed",
        "pip": "failed",
        "looped": "failed",
        "recovered": "ok",
        "rescued": "failed",
        "cleaned": "failed",
        "gone": "unreachable",
    }
    assert outcomes["disk"]["task"] == "Check that the virtualenv's filesystem has room for vLLM."
    assert outcomes["gone"]["task"] == "Pass everywhere."
    # The ignored failure counts as ignored, not failed; the rescue as rescued.
    assert outcomes["fine"]["recap"]["ignored"] == 1 and outcomes["fine"]["recap"]["failures"] == 0
    assert outcomes["recovered"]["recap"]["rescued"] == 1
    assert outcomes["gone"]["recap"]["unreachable"] == 1
    assert outcomes["fine"]["task"] is None and outcomes["fine"]["message"] is None


def test_an_unreachable_host_is_named_with_what_to_do(failed_run):
    failed, results = failed_run
    assert failed.why == "unreachable"
    assert failed.hosts == host_failures(results)
    assert failed.hosts["gone"] == (
        "unreachable (Failed to connect to the host via ssh: ssh: connect to host 127.0.0.2 "
        f"port 1: Connection refused): {UNREACHABLE_ADVICE}"
    )


def test_a_failed_assertion_gives_its_message_on_one_line(failed_run):
    assert host_failures(failed_run[1])["disk"] == (
        "No space left for vLLM on disk: /opt/vfleet/vllm has 4 MiB free and the install "
        "needs 3072 MiB (vllm_min_free_mb). Free space there or put vllm_venv on a larger "
        "disk, then re-run."
    )


def test_a_failed_command_adds_its_last_stderr_line(failed_run):
    assert host_failures(failed_run[1])["pip"] == (
        "non-zero return code: ERROR: Could not install packages due to an OSError: "
        "[Errno 28] No space left on device"
    )


def test_a_loop_names_the_item_that_failed_and_the_last_failure_explains(failed_run):
    found = host_failures(failed_run[1])
    assert found["looped"] == "engine-1 did not answer"
    assert found["rescued"] == "Wait until each engine answers /health. failed on rescued"


def test_ignored_failures_and_recovered_hosts_are_not_named(failed_run):
    found = host_failures(failed_run[1])
    assert sorted(found) == ["cleaned", "disk", "gone", "looped", "pip", "rescued"]
    assert found["cleaned"] == "the engine did not start"  # not the ignored clean-up's


def test_without_a_results_file_no_host_is_named(tmp_path):
    # ansible-playbook stopped before its recap (a syntax error): the output's tail stands in.
    assert host_failures(tmp_path / "missing.json") == {}
    (tmp_path / "half.json").write_text('{"hosts": {"h1"')
    assert host_failures(tmp_path / "half.json") == {}


def test_a_second_run_does_not_name_the_first_runs_hosts(tmp_path):
    ctx = Context("local", _bundle(tmp_path))
    stale = ctx.artifacts / "logs" / "play.results.json"
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps({"hosts": {"h9": {"status": "failed", "message": "old"}}}))
    argv = [sys.executable, "-c", "raise SystemExit(4)"]
    with pytest.raises(PhaseFailed) as caught:
        commands.run(ctx, "install", argv, "play", ansible=True)
    assert caught.value.hosts == {} and caught.value.why == "exit 4"


def test_the_message_has_a_line_per_host_the_log_and_the_resume_command():
    failed = PhaseFailed(
        "install", "unreachable", {"h2": "unreachable (x): do y"}, "logs/site.log", "tail\n"
    )
    assert failed.describe("make deploy ENV=local").splitlines() == [
        "phase 'install' failed on h2 (unreachable); nothing after it was started.",
        "  h2: unreachable (x): do y",
        "Log: logs/site.log",
        "Resume with: make deploy ENV=local",
    ]
    # Without a host to name (a controller-side command), the output's tail stands in.
    bare = PhaseFailed("plan", "exit 2", {}, "logs/plan.log", "vfleet: error: bad\n")
    assert bare.describe("make plan ENV=local").splitlines()[1] == "vfleet: error: bad"

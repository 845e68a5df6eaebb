"""What `make deploy` tells the operator when a phase fails, from ansible-playbook output in
the shapes ansible-core 2.19 prints (callback_result_format = yaml, and the JSON one-liners
of other callbacks). Fast: no hosts; the fault tests check the same lines for real."""

from __future__ import annotations

from vfleet.pipeline import UNREACHABLE_ADVICE, PhaseFailed, host_failures

# ansible-playbook prints "=> " with a trailing space before a YAML result.
UNREACHABLE = (
    "TASK [common : Write the extra apt sources.] *****************************",
    "ok: [h1]",
    "fatal: [h2]: UNREACHABLE! => ",
    "    changed: false",
    "    msg: |-",
    "        Task failed: Failed to connect to the host via ssh: ssh: connect to host "
    "10.213.0.12 port 22: No route to host",
    "    unreachable: true",
    "",
    "PLAY RECAP ***************************************************************",
    "h1    : ok=40   changed=0    unreachable=0    failed=0    skipped=9    rescued=0",
    "h2    : ok=3    changed=0    unreachable=1    failed=0    skipped=0    rescued=0",
)

PREFLIGHT = (
    "TASK [vllm : Check that the virtualenv's filesystem has room for vLLM.] **",
    "[ERROR]: Task failed: Action failed: No space left for vLLM on h1: ...",
    "fatal: [h1]: FAILED! => ",
    "    assertion: _vllm_free_mb.stdout | int >= vllm_min_free_mb | int",
    "    changed: false",
    "    evaluated_to: false",
    "    msg: 'No space left for vLLM on h1: /opt/vfleet/vllm has 4 MiB free and the install",
    "        needs 3072 MiB (vllm_min_free_mb). Free space there or put vllm_venv on a larger",
    "        disk, then re-run.'",
    "ok: [h2]",
)

RESCUED = (
    "fatal: [h1]: FAILED! => ",
    "    msg: Status code was -1 and not [200]: Request failed",
    "...ignoring",
    "failed: [h2] (item=engine-1 http://10.213.0.12:8000/health) => ",
    "    ansible_loop_var: item",
    "    msg: 'Status code was -1 and not [200]: Request failed: <urlopen error [Errno 111]>'",
    "fatal: [h2]: FAILED! => ",
    "    msg: One or more items failed",
    "fatal: [h2]: FAILED! => ",
    "    changed: false",
    "    msg: Wait until each engine answers /health. failed on h2 (vfleet-vllm-engine-1.service;",
    "        the journal is above)",
)

RECOVERED = (
    "fatal: [h1]: FAILED! => ",
    "    msg: a rescue block handled this",
    "fatal: [h2]: FAILED! => ",
    "    msg: this one stayed failed",
    "PLAY RECAP ***************************************************************",
    "h1    : ok=9    changed=0    unreachable=0    failed=0    skipped=0    rescued=1",
    "h2    : ok=3    changed=0    unreachable=0    failed=1    skipped=0    rescued=0",
)

PIP = (
    'fatal: [h1]: FAILED! => {"changed": true, "cmd": ["/opt/vfleet/vllm/bin/python", "-m", '
    '"pip"], "msg": "non-zero return code", "rc": 1, "stderr": "ERROR: Could not install '
    'packages due to an OSError: [Errno 28] No space left on device\\n\\n", "stdout": ""}',
)


def _lines(output: tuple[str, ...]) -> list[str]:
    return [f"{line}\n" for line in output]


def test_an_unreachable_host_is_named_with_what_to_do():
    found = host_failures(_lines(UNREACHABLE))
    assert list(found) == ["h2"]
    assert found["h2"] == (
        "unreachable (Failed to connect to the host via ssh: ssh: connect to host "
        f"10.213.0.12 port 22: No route to host): {UNREACHABLE_ADVICE}"
    )


def test_a_failed_assertion_gives_its_message_on_one_line():
    found = host_failures(_lines(PREFLIGHT))
    assert found == {
        "h1": "No space left for vLLM on h1: /opt/vfleet/vllm has 4 MiB free and the install "
        "needs 3072 MiB (vllm_min_free_mb). Free space there or put vllm_venv on a larger "
        "disk, then re-run."
    }


def test_the_last_failure_explains_ignored_and_looped_ones_do_not():
    found = host_failures(_lines(RESCUED))
    assert list(found) == ["h2"]
    assert found["h2"].startswith("Wait until each engine answers /health. failed on h2")


def test_a_host_whose_rescue_recovered_is_not_named():
    assert host_failures(_lines(RECOVERED)) == {"h2": "this one stayed failed"}


def test_a_failed_command_adds_its_last_stderr_line():
    found = host_failures(_lines(PIP))
    assert found == {
        "h1": "non-zero return code: ERROR: Could not install packages due to an OSError: "
        "[Errno 28] No space left on device"
    }


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

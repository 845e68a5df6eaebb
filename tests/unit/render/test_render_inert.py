"""`vfleet render` is inert: no option value runs a command, adds a unit directive or writes
outside --out. Values the formats can carry are quoted and proven harmless by running the
rendered launch.sh; values they cannot carry are refused with one line, before any write."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.render_cases import ONE_H100_X4, TWO_H100_ETH
from vfleet.cli.main import main
from vfleet.render import write as render_write
from vfleet.render.env_file import vfleet_env_names
from vfleet.render.formats import environments

MARK = "PWNED"  # every injection attempt below tries to create a file of this name


def _plan(work: Path, cluster_text: str, *args: str) -> tuple[Path, Path]:
    work.mkdir(parents=True, exist_ok=True)
    cluster = work / "cluster.yaml"
    cluster.write_text(cluster_text)
    plan = work / "plan.json"
    assert main(["plan", "--cluster", str(cluster), "--out", str(plan), "--json", *args]) == 0
    return plan, cluster


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> tuple[Path, Path]:
    """Four single-GPU replicas of Llama 8B on one host: engine-0 .. engine-3."""
    return _plan(
        tmp_path_factory.mktemp("single"),
        ONE_H100_X4,
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--vllm-version",
        "0.32.0",
    )


@pytest.fixture(scope="module")
def tp4(tmp_path_factory) -> tuple[Path, Path]:
    """The same host, one TP4 engine."""
    return _plan(
        tmp_path_factory.mktemp("tp4"),
        ONE_H100_X4,
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--vllm-version",
        "0.32.0",
        "--layout",
        "TP4",
    )


@pytest.fixture(scope="module")
def ray(tmp_path_factory) -> tuple[Path, Path]:
    """DeepSeek V3 over two hosts with Ray (vLLM 0.10.2)."""
    return _plan(
        tmp_path_factory.mktemp("ray"),
        TWO_H100_ETH,
        "--model",
        "deepseek-ai/DeepSeek-V3",
        "--vllm-version",
        "0.10.2",
        "--layout",
        "TP8 PP2 EP",
    )


def _render(capsys, plan: Path, cluster: Path, out: Path, *args: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(["render", "--plan", str(plan), "--cluster", str(cluster), "--out", str(out), *args])
    return rc, capsys.readouterr().err


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def _refused(rc: int, err: str, needle: str) -> None:
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vfleet: error: "), err
    assert needle in lines[0], err


LONG = "/" + "a" * 5000

# (render arguments, a phrase the one error line must contain)
REFUSED = [
    (["--model-path", "/srv/m\nExecStartPre=/bin/touch /tmp/x"], "--model-path: must not contain"),
    (["--model-path", "../srv/m"], "--model-path: must be an absolute path"),
    (["--model-path", LONG], "--model-path: must be an absolute path"),
    (["--served-model-name", "m\n--host=0.0.0.0"], "--served-model-name: must not contain"),
    (["--served-model-name", "m" * 300], "--served-model-name: String should have at most 256"),
    (["--vllm-bin", "/opt/vllm\nExecStartPre=/bin/sh"], "--vllm-bin: must not contain"),
    (["--vllm-bin", "$(touch /tmp/x)"], "--vllm-bin: must be an absolute path"),
    (["--vllm-bin", LONG], "--vllm-bin: must be an absolute path"),
    (["--api-key-file", "/etc/k\n"], "--api-key-file: must not contain"),
    (["--api-key-file", "`touch x`"], "--api-key-file: must be an absolute path"),
    (["--api-key-file", LONG], "--api-key-file: must be an absolute path"),
    (["--draft-model-path", "/srv/d\r"], "--draft-model-path: must not contain"),
    (["--draft-model-path", "../d"], "--draft-model-path: must be an absolute path"),
    (["--install-dir", "/etc/v\nExecStartPre=/bin/sh"], "--install-dir: must not contain"),
    (["--install-dir", "/etc/$(touch /tmp/x)"], "--install-dir: must be an absolute path of"),
    (["--install-dir", "/etc/`id`"], "--install-dir: must be an absolute path of"),
    (["--install-dir", "/etc/v f"], "--install-dir: must be an absolute path of"),
    (["--install-dir", "/etc/'v'"], "--install-dir: must be an absolute path of"),
    (["--install-dir", '/etc/"v"'], "--install-dir: must be an absolute path of"),
    (["--install-dir", "../../x"], "--install-dir: must be an absolute path"),
    (["--install-dir", LONG], "--install-dir: must be an absolute path"),
    (["--port", "65534"], "--port: the last of the 4 engines on one host would get port 65537"),
    (["--port", "70000"], "70000"),
    (["--port", "$(id)"], "--port"),
    (["--extra-arg=--host=0.0.0.0"], "vfleet sets --host"),
    (["--extra-arg=--host", "--extra-arg=0.0.0.0"], "vfleet sets --host"),
    (["--extra-arg=--port=9000"], "vfleet sets --port"),
    (
        ["--extra-arg=--api-key=secret"],
        "vfleet sets --api-key for every engine; use --api-key-file",
    ),
    (["--extra-arg=--model=/x"], "vfleet sets --model"),
    (["--extra-arg=--served-model-name=x"], "vfleet sets --served-model-name"),
    (["--extra-arg=--config=/tmp/x.yaml"], "vfleet sets --config"),
    (["--extra-arg=--data-parallel-address=10.0.0.1"], "vfleet sets --data-parallel-address"),
    (["--extra-arg=-dpp", "--extra-arg=1"], "vfleet sets --data-parallel-rpc-port"),
    (["--extra-arg=--data-parallel-rank=1"], "vfleet sets --data-parallel-rank"),
    (["--extra-arg=-tp=2"], "the plan sets --tensor-parallel-size; the plan's layout"),
    (["--extra-arg=--tensor_parallel_size=2"], "the plan sets --tensor-parallel-size"),
    (["--extra-arg=-pp", "--extra-arg=2"], "the plan sets --pipeline-parallel-size"),
    (["--extra-arg=-dp=2"], "the plan sets --data-parallel-size"),
    (["--extra-arg=--enable-expert-parallel"], "the plan sets --enable-expert-parallel"),
    (["--extra-arg=--no-enable-expert-parallel"], "the plan sets --enable-expert-parallel"),
    (["--extra-arg=--gpu-memory-utilization=0.5"], "vfleet plan --gpu-memory-utilization"),
    (["--extra-arg=--max-num-seqs=4"], "the plan sets --max-num-seqs"),
    (["--extra-arg=--max-num-batched-tokens=4"], "the plan sets --max-num-batched-tokens"),
    (["--extra-arg=--max-model-len=4"], "the plan sets --max-model-len"),
    (["--extra-arg=--kv-cache-dtype=auto"], "vfleet plan --kv-cache-dtype"),
    (["--extra-arg=--no-enable-chunked-prefill"], "the plan sets --enable-chunked-prefill"),
    (["--extra-arg=--hots=1"], "vLLM 0.32.0 has no --hots"),
    (["--extra-arg=--" + "x" * 5000], "--extra-arg[0]: String should have at most 4096"),
    (["--extra-arg=--dtype=bf16\nExecStartPre=/bin/sh"], "--extra-arg[0]: must not contain"),
    (["--extra-arg=/other/model"], "vLLM would read it as the model"),
    (["--extra-arg=--dtype", "--extra-arg=half", "--extra-arg=x"], "vLLM would read it as"),
    (["--extra-arg=--enforce-eager", "--extra-arg=x"], "vLLM would read it as the model"),
    (["--extra-arg=--"], "vLLM would read what follows as the model"),
    (["--env=1BAD=x"], "--env[0]: must be a shell identifier"),
    (["--env=A B=x"], "--env[0]: must be a shell identifier"),
    (["--env=K%n=x"], "--env[0]: must be a shell identifier"),
    (["--env=$(touch x)=1"], "--env[0]: must be a shell identifier"),
    (["--env=NOVALUE"], "--env[0]: must be KEY=VALUE"),
    (["--env=K=a\nExecStartPre=/bin/sh"], "--env[0]: value must not contain"),
    (["--env=K=a\x01"], "--env[0]: value must not contain"),
    (["--env=K=" + "a" * 9000], "--env[0]: String should have at most 8192"),
    (["--env=VLLM_BIN=/tmp/x"], "vfleet sets VLLM_BIN"),
    (["--env=VLLM_API_KEY=k"], "vfleet sets VLLM_API_KEY"),
    (["--env=BASH_ENV=/tmp/x"], "bash reads BASH_ENV"),
    *(([f"--env={name}=x"], f"vfleet sets {name}") for name in sorted(vfleet_env_names())),
]


@pytest.mark.parametrize(("args", "needle"), REFUSED, ids=lambda v: repr(v)[:50])
def test_hostile_options_are_refused_in_one_line_before_any_write(
    capsys, single, tmp_path, monkeypatch, args, needle
):
    monkeypatch.chdir(tmp_path)
    rc, err = _render(capsys, *single, tmp_path / "out", *args)
    _refused(rc, err, needle)
    assert not (tmp_path / "out").exists() and not (tmp_path / MARK).exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no staging folder left either


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("../../x", "host name '../../x' must be an RFC 1123 label"),
        ("/tmp/x", "host name '/tmp/x' must be an RFC 1123 label"),
        ("gpu-a\nExecStartPre=/bin/sh", "must be an RFC 1123 label"),
        ("gpu%n", "must be an RFC 1123 label"),
        ("gpu a", "must be an RFC 1123 label"),
        ("g" * 64, "must be an RFC 1123 label"),
    ],
)
def test_host_names_that_are_not_labels_are_refused(capsys, tmp_path, name, needle):
    plan, _ = _plan(
        tmp_path / "p",
        ONE_H100_X4,
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--vllm-version",
        "0.32.0",
    )
    doc = json.loads(plan.read_text())
    for host in doc["hosts"]:
        host["host"] = name
    plan.write_text(json.dumps(doc))
    cluster = tmp_path / "bad.yaml"
    cluster.write_text(ONE_H100_X4.replace("name: gpu-a", f"name: {json.dumps(name)}"))
    out = tmp_path / "o"
    rc, err = _render(capsys, plan, cluster, out)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "label" in err or "name" in err, err  # the cluster model may refuse it first
    assert not out.exists() and not (tmp_path / "x").exists()


def test_engine_ids_that_are_not_labels_are_refused(capsys, single, tmp_path):
    plan, cluster = single
    doc = json.loads(plan.read_text())
    doc["hosts"][0]["engines"]["../../x"] = doc["hosts"][0]["engines"].pop("0")
    bad = tmp_path / "plan.json"
    bad.write_text(json.dumps(doc))
    rc, err = _render(capsys, bad, cluster, tmp_path / "o")
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o").exists() and not (tmp_path.parent / "x").exists()


def test_a_plan_file_name_with_a_newline_is_refused(capsys, single, tmp_path):
    plan, cluster = single
    odd = tmp_path / "plan\n# x.json"
    shutil.copy(plan, odd)
    rc, err = _render(capsys, odd, cluster, tmp_path / "o")
    _refused(rc, err, "--plan: must not contain")


def test_out_that_is_a_file_or_under_a_file_is_refused(capsys, single, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("keep")
    rc, err = _render(capsys, *single, afile)
    _refused(rc, err, "is a file: pass a directory")
    rc, err = _render(capsys, *single, afile / "launch")
    _refused(rc, err, f"lies under the file {afile}")
    assert afile.read_text() == "keep"


def test_out_holding_other_files_is_not_replaced(capsys, single, tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    rc, err = _render(capsys, *single, out)
    _refused(rc, err, "holds 'notes.txt', which no render wrote")
    assert (out / "notes.txt").read_text() == "mine"


def _printer(work: Path) -> Path:
    """A stand-in for vllm that records its argv (NUL-separated) and the API key."""
    script = work / "fake-vllm"
    script.write_text(
        "#!/bin/bash\n"
        'printf "%s\\0" "$@" > "$ARGV_OUT"\n'
        'printf "%s" "${VLLM_API_KEY-}" > "$ARGV_OUT.key"\n'
    )
    script.chmod(0o755)
    return script


def _run_launch(script: Path, work: Path, env: dict[str, str] | None = None) -> list[str]:
    """bash -n, then run launch.sh with the printer as VLLM_BIN; returns the argv it got."""
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    argv_out = work / "argv.bin"
    argv_out.unlink(missing_ok=True)
    run = subprocess.run(
        ["bash", str(script)],
        cwd=work,
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "VLLM_BIN": str(_printer(work)),
            "ARGV_OUT": str(argv_out),
            **(env or {}),
        },
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    return argv_out.read_bytes().decode().split("\0")[:-1]


HOSTILE = f"$(touch {MARK}) `touch {MARK}` \"q\" 'q' ; touch {MARK} %n ${{HOME}} \\ *"


def test_hostile_but_representable_values_are_quoted_and_inert(capsys, single, tmp_path):
    work = tmp_path / "run"
    work.mkdir()
    key = work / f"key '{HOSTILE}'"
    key.write_text("s3cret")
    model = f"/srv/models/{HOSTILE}"
    name = f"name {HOSTILE}"
    out = tmp_path / "o"
    rc, err = _render(
        capsys,
        *single,
        out,
        f"--model-path={model}",
        f"--served-model-name={name}",
        f"--api-key-file={key}",
        f"--vllm-bin=/opt/{HOSTILE}/vllm",
        f"--env=NCCL_DEBUG={HOSTILE}",
        f"--extra-arg=--dtype={HOSTILE}",
        "--extra-arg=--chat-template",
        f"--extra-arg={HOSTILE}",
        "--extra-arg=--enforce-eager",
    )
    assert rc == 0, err
    for engine in range(4):
        folder = out / "gpu-a" / f"engine-{engine}"
        argv = _run_launch(folder / "launch.sh", work)
        assert not (work / MARK).exists() and not (tmp_path / MARK).exists()
        command = json.loads((folder / "command.json").read_text())
        assert command[0] == f"/opt/{HOSTILE}/vllm" and argv == command[1:]
        assert argv[:2] == ["serve", model]
        assert argv[argv.index("--served-model-name") + 1] == name
        assert argv[-4:] == [f"--dtype={HOSTILE}", "--chat-template", HOSTILE, "--enforce-eager"]
        assert argv[argv.index("--port") + 1] == str(8000 + engine)
        assert (work / "argv.bin.key").read_text() == "s3cret"
        # bash reads a double-quoted value with the same escapes as systemd's EnvironmentFile.
        env_file = folder / "vllm.env"
        shown = subprocess.run(
            ["bash", "-c", 'set -a; . "$0"; printf %s "$NCCL_DEBUG"', str(env_file)],
            capture_output=True,
            text=True,
            cwd=work,
            check=True,
        ).stdout
        assert shown == HOSTILE and not (work / MARK).exists()
        lines = env_file.read_text().splitlines()  # no value spilled onto a line of its own
        assert all(re.match(r"(#|[A-Za-z_][A-Za-z0-9_]*=)", line) for line in lines), lines


def _unescaped_percent(text: str) -> bool:
    return "%" in text.replace("%%", "")


def test_unit_files_double_percent(capsys, ray, tmp_path):
    out = tmp_path / "o"
    rc, err = _render(capsys, *ray, out, "--vllm-bin=/opt/v%n/bin/vllm", "--install-dir=/etc/v%n")
    assert rc == 0, err
    units = sorted(out.rglob("*.service"))
    assert len(units) == 3  # vLLM on the head, Ray on both hosts
    for unit in units:
        assert not _unescaped_percent(unit.read_text()), unit
    vllm = (out / "gpu-a/engine-0/vfleet-vllm-engine-0.service").read_text()
    assert "WorkingDirectory=/etc/v%%n/engine-0" in vllm
    assert "ExecStart=/bin/bash /etc/v%%n/engine-0/launch.sh" in vllm
    head = (out / "gpu-a/engine-0/vfleet-ray-engine-0.service").read_text()
    assert "ExecStart=/opt/v%%n/bin/ray start --block --head" in head
    assert "ExecStop=/opt/v%%n/bin/ray stop" in head


@pytest.mark.parametrize("vllm_bin", ["/opt/v l/bin/vllm", '/opt/"v"/bin/vllm', "/opt/$x/vllm"])
def test_ray_refuses_a_vllm_bin_systemd_cannot_execute(capsys, ray, tmp_path, vllm_bin):
    # systemd refuses an ExecStart= executable with spaces, quotes or $ in its name.
    rc, err = _render(capsys, *ray, tmp_path / "o", f"--vllm-bin={vllm_bin}")
    _refused(rc, err, "Ray mode starts")
    assert "--vllm-bin" in err and not (tmp_path / "o").exists()


def test_a_failing_render_leaves_the_previous_one_whole(capsys, single, tmp_path, monkeypatch):
    out = tmp_path / "o"
    assert _render(capsys, *single, out)[0] == 0
    before = _tree(out)
    calls = {"n": 0}
    real_write = render_write._write

    def failing(path, content, mode):
        calls["n"] += 1
        if calls["n"] == 5:
            raise OSError(28, "No space left on device")
        real_write(path, content, mode)

    monkeypatch.setattr(render_write, "_write", failing)
    rc, err = _render(capsys, *single, out, "--port", "9000")
    _refused(rc, err, "No space left on device; the previous render is untouched")
    assert _tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]  # staging removed


def test_a_failing_swap_puts_the_previous_render_back(capsys, single, tmp_path, monkeypatch):
    out = tmp_path / "o"
    assert _render(capsys, *single, out)[0] == 0
    before = _tree(out)
    real_rename = os.rename

    def rename(src, dst):
        if ".new-" in str(src):
            raise OSError(5, "Input/output error")
        real_rename(src, dst)

    monkeypatch.setattr(render_write.os, "rename", rename)
    rc, err = _render(capsys, *single, out, "--port", "9000")
    _refused(rc, err, "Input/output error")
    assert _tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]


def test_a_render_with_fewer_engines_removes_the_old_engine_folders(capsys, single, tp4, tmp_path):
    out = tmp_path / "o"
    assert _render(capsys, *single, out)[0] == 0
    assert sorted(p.name for p in (out / "gpu-a").iterdir()) == [f"engine-{i}" for i in range(4)]
    assert _render(capsys, *tp4, out)[0] == 0
    assert sorted(p.name for p in (out / "gpu-a").iterdir()) == ["engine-0"]
    endpoints = json.loads((out / "endpoints.json").read_text())["endpoints"]
    assert [e["engine"] for e in endpoints] == ["engine-0"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]  # the old tree is gone


def test_file_modes_do_not_depend_on_the_umask(capsys, single, tmp_path):
    old = os.umask(0o077)
    try:
        assert _render(capsys, *single, tmp_path / "o", "--api-key-file=/etc/k")[0] == 0
    finally:
        os.umask(old)
    for path in (tmp_path / "o").rglob("*"):
        mode = stat.S_IMODE(path.stat().st_mode)
        want = 0o755 if path.is_dir() or path.name == "launch.sh" else 0o644
        assert mode == want, (path, oct(mode))


def test_extra_args_in_both_spellings_are_passed_through(capsys, single, tmp_path):
    out = tmp_path / "o"
    rc, err = _render(
        capsys,
        *single,
        out,
        "--extra-arg=--kv-cache-memory-bytes=67108864",
        "--extra-arg=--dtype",
        "--extra-arg=bfloat16",
        "--extra-arg=--enforce-eager",
        "--extra-arg=--seed",
        "--extra-arg=-1",
    )
    assert rc == 0, err
    command = json.loads((out / "gpu-a/engine-0/command.json").read_text())
    assert command[-6:] == [
        "--kv-cache-memory-bytes=67108864",
        "--dtype",
        "bfloat16",
        "--enforce-eager",
        "--seed",
        "-1",
    ]


def test_unknown_extra_flag_names_the_release(capsys, ray, tmp_path):
    # --all2all-backend first appears in 0.11.1; the ray plan targets 0.10.2.
    rc, err = _render(capsys, *ray, tmp_path / "o", "--extra-arg=--all2all-backend=naive")
    _refused(rc, err, "vLLM 0.10.2 has no --all2all-backend")


def test_every_template_value_must_pass_its_format_filter():
    envs = environments()
    for suffix, filt in ((".sh.j2", "shquote"), (".service.j2", "unit"), (".env.j2", "env_value")):
        env = envs[suffix]
        with pytest.raises(TypeError, match="unfiltered value"):
            env.from_string("x={{ value }}").render(value="$(touch x)")
        with pytest.raises(TypeError, match="unfiltered value"):  # stock filters are gone
            env.from_string("x={{ value | " + filt + " ~ '' }}").render(value="v")
        assert env.from_string("x={{ value | " + filt + " }}").render(value="v") == "x=v"
    assert envs[".sh.j2"].from_string("{{ v | shquote }}").render(v="$(x)") == "'$(x)'"


def test_the_env_names_vfleet_owns_come_from_the_code():
    assert {
        "CUDA_VISIBLE_DEVICES",
        "VLLM_HOST_IP",
        "NCCL_SOCKET_IFNAME",
        "GLOO_SOCKET_IFNAME",
        "NCCL_IB_HCA",
        "NCCL_IB_GID_INDEX",
        "VLLM_ALL2ALL_BACKEND",
        "HF_HUB_OFFLINE",
        "VLLM_NO_USAGE_STATS",
        "DO_NOT_TRACK",
        "VLLM_BIN",
        "VLLM_API_KEY",
    } == set(vfleet_env_names())


# Any text a format can carry: everything but control characters and surrogates.
TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=30).filter(
    lambda s: not re.search(r"[\x00-\x1f\x7f]", s)
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(name=TEXT, model=TEXT, value=TEXT.filter(lambda s: not s.startswith("-")))
def test_launch_sh_passes_exactly_the_intended_argv(
    capsys, tp4, tmp_path_factory, name, model, value
):
    work = tmp_path_factory.mktemp("h")
    out = work / "o"
    rc, err = _render(
        capsys,
        *tp4,
        out,
        f"--served-model-name={name}",
        f"--model-path=/{model}",
        f"--env=VFLEET_TEST={value}",
        "--extra-arg=--chat-template",
        f"--extra-arg={value}",
    )
    assert rc == 0, err
    folder = out / "gpu-a/engine-0"
    argv = _run_launch(folder / "launch.sh", work)
    assert argv[:2] == ["serve", f"/{model}"]
    assert argv[argv.index("--served-model-name") + 1] == name
    assert argv[-2:] == ["--chat-template", value]
    assert argv == json.loads((folder / "command.json").read_text())[1:]
    shown = subprocess.run(
        ["bash", "-c", 'set -a; . "$0"; printf %s "$VFLEET_TEST"', str(folder / "vllm.env")],
        capture_output=True,
        text=True,
        cwd=work,
        check=True,
    ).stdout
    assert shown == value
    assert not any(p.name == MARK for p in work.rglob("*"))
    shutil.rmtree(work)

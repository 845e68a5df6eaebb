"""Hostile input to every `vfleet` command, in process: control characters, shell text,
`../`, long strings, undecodable bytes and absurd numbers in each flag, and broken files
(binary, empty, a folder, an alias bomb, duplicate keys, wrong types) in each file argument.

Whatever the input, the command exits 0, or exits 2 with exactly one stderr line starting
`vfleet: error:`; it never raises, never reaches the last-resort handler (exit 70), never
runs past ALARM_S, and writes nothing outside its temporary folder.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.paths import DATA, REPO
from vfleet.cli import main as cli
from vfleet.cli.main import COMMANDS
from vfleet.errors import UserError

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
ALARM_S = 20
SETTINGS = settings(
    derandomize=True,
    deadline=15_000,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

TEXT = st.one_of(
    st.sampled_from(
        [
            "",
            " ",
            "\n",
            "a\nb",
            "a\rb",
            "\x00",
            "\t",
            "\x1b[31mred",
            "$(touch pwned)",
            "`touch pwned`",
            "'",
            '"',
            "a;b",
            "../",
            "../../../../etc/passwd",
            "-",
            "--",
            "-h",
            "x" * 5000,
            os.fsdecode(b"\xff\xfe\x80"),
            "\u202e",
            "１２",
            "%s%n",
            "{}",
            "null",
            "~",
            "*",
            "http://",
            "http://[::1",
        ]
    ),
    st.text(max_size=30),
)
NUMBER = st.sampled_from(
    [
        "0",
        "-1",
        "-0",
        "nan",
        "NaN",
        "inf",
        "-inf",
        "1e308",
        "1e309",
        "9" * 400,
        str(2**63),
        "1e9",
        "1000000000",
        "0.0",
        "0.5",
        "1",
        " 7 ",
        "+3",
        "7",
        "0x10",
        "1_0",
    ]
)
VALUE = st.one_of(TEXT, NUMBER)

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
    for i in range(8)
)
BAD_FILES = {
    "binary": b"\x00\x01\x02\xff",
    "empty": b"",
    "latin1.yaml": "nodes: \xe9".encode("latin-1"),
    "bomb.yaml": BOMB.encode(),
    "dup.yaml": b"nodes: 1\nnodes: 2\n",
    "types.yaml": b"nodes: eight\ngpus_per_node: [1]\ngpu: 5\n",
    "list.json": b"[1, 2, 3]",
    "nan.json": b'{"max_num_seqs": NaN}',
    "types.json": b'{"max_num_seqs": "many", "max_model_len": -3, "hosts": 7}',
    "deep.json": b"[" * 5000 + b"]" * 5000,
    "dup.json": b'{"model": "a", "model": "b"}',
    "log.txt": b"non-default args: {'max_num_seqs': 'x', 'max_num_batched_tokens': None}\n"
    b"Free memory on device cuda:0 (1.2.3/0 GiB) utilization (0.9, 0 GiB)\n"
    b"0 GiB KV cache is needed, available KV cache memory (0 GiB)\n"
    b"non-default args: {1, 2}\nCUDA out of memory\n",
}


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder holding every file argument, and the cwd while the commands run."""
    root = tmp_path_factory.mktemp("hostile")
    for name, data in BAD_FILES.items():
        (root / name).write_bytes(data)
    (root / "folder").mkdir()
    os.mkfifo(root / "fifo")  # a named pipe with no writer: reading it would wait forever
    shutil.copy(REPO / "examples/clusters/1x8-h200.yaml", root / "cluster.yaml")
    shutil.copy(DATA / "render/single-replicas/endpoints.json", root / "endpoints.json")
    (root / "out").mkdir()
    old = Path.cwd()
    os.chdir(root)
    try:
        assert (
            _run(["plan", "--cluster", "cluster.yaml", "--model", MODEL, "--out", "plan.json"])[0]
            == 0
        )
        yield root
    finally:
        os.chdir(old)


FILES = st.sampled_from(
    [*BAD_FILES, "folder", "missing", "fifo", "/dev/zero", "cluster.yaml", "plan.json"]
)


class Hang(BaseException):
    """Raised by the alarm; a BaseException so main()'s last resort cannot swallow it."""


def _alarm(_signum, _frame):
    raise Hang(f"no answer within {ALARM_S} s")


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(ALARM_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = cli.main(argv)
            except SystemExit as exc:  # argparse's own --help, reached through a value
                rc = exc.code if isinstance(exc.code, int) else 2
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return rc, out.getvalue(), err.getvalue()


def _tree(path: Path) -> set[tuple[str, int]]:
    if not path.exists():
        return set()
    return {(str(p.relative_to(path)), p.stat().st_mtime_ns) for p in path.rglob("*")}


def check(argv: list[str]) -> None:
    """The contract, and nothing written to the repository or its artifacts."""
    before = ({p.name for p in REPO.iterdir()}, _tree(REPO / "artifacts"))
    rc, _out, err = _run(argv)
    assert rc in (0, 2), f"exit {rc} for {argv!r}: {err[-2000:]}"
    if rc == 2:
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("vfleet: error: "), (argv, err)
    after = ({p.name for p in REPO.iterdir()}, _tree(REPO / "artifacts"))
    assert after == before, (argv, after[0] ^ before[0], after[1] ^ before[1])


def _flags(draw, work: Path, numbers: list[str], texts: list[str], files: list[str]):
    """Up to three of the command's flags, each given one hostile value."""
    out: list[str] = []
    pool = [(f, "n") for f in numbers] + [(f, "t") for f in texts] + [(f, "f") for f in files]
    for flag, kind in draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3, unique=True)):
        if kind == "n":
            value = draw(st.one_of(NUMBER, NUMBER, TEXT))
        elif kind == "t":
            value = draw(VALUE)
        else:
            value = str(work / draw(FILES)) if draw(st.booleans()) else draw(VALUE)
        out.append(f"{flag}={value}")  # `=`: a value starting with - stays a value
    return out


def _output(draw, work: Path) -> str:
    """An output path inside the work folder, named by hostile text."""
    name = draw(TEXT).replace("/", "_").replace("\x00", "_")
    if name in ("", ".", ".."):
        name = "x"
    return str(work / "out" / name[:200])


BUDGET_NUM = [
    "--gpu-memory-gib",
    "--tp",
    "--pp",
    "--dp",
    "--dcp",
    "--gpu-memory-utilization",
    "--max-model-len",
    "--max-num-batched-tokens",
    "--max-num-seqs",
    "--kv-cache-memory-bytes",
    "--block-size",
    "--cpu-offload-gb",
    "--mean-context-len",
    "--num-speculative-tokens",
    "--sweep-gpu-memory-utilization",
]
BUDGET_TEXT = [
    "--gpu",
    "--kv-cache-dtype",
    "--dtype",
    "--quantization",
    "--vllm-version",
    "--speculative-method",
]


@settings(SETTINGS, max_examples=60)
@given(data=st.data())
def test_budget(work, data):
    argv = ["budget", "--model", MODEL, "--gpu", "H100-SXM-80GB"]
    argv += _flags(data.draw, work, BUDGET_NUM, BUDGET_TEXT, ["--model", "--draft-model"])
    if data.draw(st.booleans()):
        argv.append("--json")
    check(argv)


@settings(SETTINGS, max_examples=6)
@given(data=st.data())
def test_budget_plot_paths(work, data):
    path = data.draw(st.one_of(st.just(_output(data.draw, work) + ".png"), VALUE))
    check(["budget", "--model", MODEL, "--gpu", "H100-SXM-80GB", "--tp", "1", f"--plot={path}"])


@settings(SETTINGS, max_examples=40)
@given(data=st.data())
def test_plan(work, data):
    argv = ["plan", "--cluster", str(work / "cluster.yaml"), "--model", MODEL]
    argv += _flags(
        data.draw,
        work,
        ["--gpu-memory-utilization", "--num-speculative-tokens"],
        ["--vllm-version", "--kv-cache-dtype", "--layout", "--speculative-method"],
        ["--cluster", "--model", "--workload"],
    )
    if data.draw(st.booleans()):
        argv.append(f"--out={_output(data.draw, work)}")
    check(argv)


@settings(SETTINGS, max_examples=30)
@given(data=st.data())
def test_estimate(work, data):
    argv = ["estimate", "--cluster", str(work / "cluster.yaml"), "--model", MODEL]
    argv += ["--layout", "TP8", "--input-len", "16", "--output-len", "4", "--num-prompts", "2"]
    argv += _flags(
        data.draw,
        work,
        [
            "--input-len",
            "--output-len",
            "--concurrency",
            "--num-prompts",
            "--request-rate",
            "--replicas",
            "--max-num-seqs",
            "--max-num-batched-tokens",
            "--max-model-len",
            "--gpu-memory-utilization",
            "--num-speculative-tokens",
        ],
        ["--layout", "--vllm-version", "--quantization", "--kv-cache-dtype", "--all2all-backend"],
        ["--cluster", "--model"],
    )
    check(argv)


@settings(SETTINGS, max_examples=30)
@given(data=st.data())
def test_render(work, data):
    argv = ["render", "--plan", str(work / "plan.json"), "--cluster", str(work / "cluster.yaml")]
    argv += [f"--out={_output(data.draw, work)}"]
    argv += _flags(
        data.draw,
        work,
        ["--port"],
        [
            "--model-path",
            "--served-model-name",
            "--vllm-bin",
            "--backend",
            "--api-key-file",
            "--install-dir",
            "--extra-arg",
            "--env",
            "--draft-model-path",
        ],
        ["--plan", "--cluster"],
    )
    check(argv)


METRIC_LINE = st.sampled_from(
    [
        'vllm:num_requests_running{{engine="0"}} {v}',
        'vllm:num_requests_waiting{{engine="0"}} {v}',
        'vllm:kv_cache_usage_perc{{engine="0"}} {v}',
        'vllm:num_preemptions_total{{engine="0"}} {v}',
        'vllm:request_success_total{{engine="0"}} {v}',
        'vllm:prompt_tokens_total{{engine="0"}} {v}',
        'vllm:cache_config_info{{block_size="{v}",num_gpu_blocks="{v}"}} 1',
        'vllm:inter_token_latency_seconds_bucket{{le="{v}"}} {v}',
        'vllm:inter_token_latency_seconds_bucket{{le="+Inf"}} {v}',
        'vllm:inter_token_latency_seconds_count{{engine="0"}} {v}',
        'vllm:request_prompt_tokens_bucket{{le="0.5"}} {v}',
        "process_cpu_seconds_total {v}",
        "# HELP {v}",
        "{v}",
    ]
)
METRIC_VALUE = st.sampled_from(
    ["0", "1", "-1", "NaN", "+Inf", "-Inf", "1e308", "3.5", "x", "", "None", "9" * 50]
)


@st.composite
def metrics_text(draw) -> str:
    lines = draw(st.lists(st.tuples(METRIC_LINE, METRIC_VALUE), max_size=12))
    return "\n".join(template.format(v=value) for template, value in lines)


class _Reply(io.BytesIO):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@settings(SETTINGS, max_examples=60)
@given(data=st.data())
def test_doctor(work, data):
    texts = data.draw(st.lists(metrics_text(), min_size=1, max_size=3))
    journal = data.draw(st.sampled_from(["", "non-default args: {'max_num_seqs': 0}", "\x00"]))

    # Drawn up front: doctor fetches in a worker thread, where Hypothesis cannot draw.
    refused = data.draw(st.lists(st.integers(0, 9), min_size=1, max_size=8), label="refused")
    calls = iter(range(10**6))

    def urlopen(url, timeout=None):
        if refused[next(calls) % len(refused)] == 0:
            raise urllib.error.URLError("refused")
        return _Reply(texts[len(url) % len(texts)].encode("utf-8", "surrogateescape"))

    clock = [0.0]

    def run(*_args, **_kwargs):
        return mock.Mock(returncode=0, stdout=journal, stderr="")

    argv = ["doctor"]
    argv += [f"--endpoint=http://127.0.0.1:{8000 + i}" for i in range(len(texts))]
    argv += _flags(
        data.draw,
        work,
        ["--max-num-seqs", "--watch"],
        ["--endpoint", "--journal"],
        ["--endpoints", "--log", "--plan"],
    )
    if data.draw(st.booleans()):
        argv.append("--json")
    with (
        mock.patch("urllib.request.urlopen", urlopen),
        mock.patch("subprocess.run", run),
        mock.patch("time.monotonic", lambda: clock[0]),
        mock.patch("time.sleep", lambda s: clock.__setitem__(0, clock[0] + s)),
    ):
        check(argv)


@settings(SETTINGS, max_examples=25)
@given(data=st.data())
def test_validate_and_listings(work, data):
    command = data.draw(st.sampled_from(["validate", "models", "gpus"]))
    argv = [command]
    if command == "validate":
        argv += _flags(data.draw, work, [], ["--env"], ["--inventory"])
    else:
        argv.append(data.draw(VALUE))  # an argument these take none of
    check(argv)


@settings(SETTINGS, max_examples=25)
@given(
    command=st.sampled_from(["deploy", "destroy", "probe", "plan-env", "restart", "known-hosts"]),
    env=VALUE.filter(lambda v: v not in ("local", "staging", "prod")),
)
def test_host_commands_refuse_a_bad_env_before_touching_anything(command, env):
    """These commands need hosts; a bad --env must stop in the parser."""
    with mock.patch("vfleet.deploy.pipeline.deploy") as deploy, mock.patch("subprocess.run") as run:
        check([command, f"--env={env}"])
    assert not deploy.called and not run.called


def test_internal_error_is_one_line_and_exit_70(monkeypatch, capsys):
    """The last resort: an unexpected exception is one line naming it, exit 70."""
    monkeypatch.setitem(COMMANDS, "models", lambda _args: {}["boom\nline"])
    monkeypatch.delenv("VFLEET_DEBUG", raising=False)
    assert cli.main(["models"]) == 70
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("vfleet: internal error: KeyError: 'boom\\nline' (a bug:")
    assert "VFLEET_DEBUG=1 shows the traceback" in err and "Traceback" not in err
    monkeypatch.setenv("VFLEET_DEBUG", "1")
    assert cli.main(["models"]) == 70
    assert "Traceback (most recent call last)" in capsys.readouterr().err


def test_a_user_error_quoting_a_newline_stays_one_line(monkeypatch, capsys):
    def refuse(_args):
        raise UserError("unknown model 'a\nb'\n")

    monkeypatch.setitem(COMMANDS, "models", refuse)
    assert cli.main(["models"]) == 2
    assert capsys.readouterr().err == "vfleet: error: unknown model 'a\\nb'\n"

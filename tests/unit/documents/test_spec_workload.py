"""The workload file: typos and unknown presets refused in one line, presets still fill what
a file leaves out, and no generated mapping gets past `workload_from_dict` as anything but a
Workload or a UserError."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from support.hostile import LOADER_SETTINGS, assert_one_line, document_values
from support.paths import REPO
from vfleet.documents.workload_file import PRESET_NAMES
from vfleet.errors import UserError
from vfleet.plan.workload import PRESETS, Workload, load_workload, workload_from_dict


def _load(tmp_path: Path, body: str) -> Workload:
    path = tmp_path / "wl.yaml"
    path.write_text(body)
    return load_workload(str(path))


BAD = [
    ("concurency: 5\n", "line 1: concurency: unknown key: did you mean 'concurrency'?"),
    ("preset: chatt\n", "line 1: preset: Input should be 'chat', 'rag' or 'batch', got 'chatt'"),
    ("preset: 1\n", "preset: Input should be 'chat', 'rag' or 'batch', got 1"),
    ("input_len: {mean: 0}\n", "line 1: input_len.mean: Input should be greater than or equal"),
    ("input_len: {mean: -5}\n", "input_len.mean: Input should be greater than or equal to 1"),
    ("input_len: {mean: 10000001}\n", "input_len.mean: Input should be less than or equal to 1000"),
    ("input_len: {mean: 1e308}\n", "input_len.mean: Input should be a valid integer, got '1e308'"),
    (
        "input_len: {mean: 1.0e+308}\n",
        "input_len.mean: Input should be a valid integer, got 1e+308",
    ),
    ("input_len: {mean: 12.5}\n", "input_len.mean: Input should be a valid integer, got 12.5"),
    ("input_len: {mean: true}\n", "input_len.mean: Input should be a valid integer, got True"),
    ("input_len: {men: 5}\n", "line 1: input_len.men: unknown key: did you mean 'mean'?"),
    ("input_len: [1, 2]\n", "input_len: Input should be a valid dictionary"),
    ("output_len:\n  mean: 512\n  p99: 100\n", "line 3: output_len.p99: 100 is below the mean"),
    (
        "input_len: {mean: 2000, p99: 1000}\n",
        "input_len.p99: 1000 is below the mean 2000: p99 must",
    ),
    ("input_len: {p99: 512}\n", "input_len.p99: 512 is below the mean 1024"),  # chat's mean
    ("concurrency: 0\n", "concurrency: Input should be greater than or equal to 1, got 0"),
    ("concurrency: 1000001\n", "concurrency: Input should be less than or equal to 1000000"),
    ("concurrency: '5'\n", "concurrency: Input should be a valid integer, got '5'; expected sim"),
    ("slo: {ttft_p99_ms: .nan}\n", "line 1: slo.ttft_p99_ms: Input should be a finite number"),
    ("slo: {tpot_p99_ms: .inf}\n", "slo.tpot_p99_ms: Input should be a finite number, got inf"),
    ("slo: {tpot_p99_ms: 0}\n", "slo.tpot_p99_ms: Input should be greater than 0"),
    ("slo: {tpot_p99_ms: '50'}\n", "slo.tpot_p99_ms: Input should be a valid number"),
    ("slo: {ttft_ms: 5}\n", "slo.ttft_ms: unknown key: did you mean 'ttft_p99_ms'?"),
    ("concurrency: 5\nconcurrency: 6\n", "'concurrency' appears twice (lines 1 and 2)"),
    ("- a\n- b\n", "a workload file must be a YAML mapping"),
    ("", "the workload file is empty"),
    ("a: &x [*x]\n", "wl.yaml"),
]


@pytest.mark.parametrize(("body", "says"), BAD)
def test_bad_workload_is_one_line_with_file_line_field_and_hint(tmp_path, body, says):
    with pytest.raises(UserError) as caught:
        _load(tmp_path, body)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(str(tmp_path / "wl.yaml")), message
    assert says in message, message


def test_the_hint_is_the_fields_description(tmp_path):
    with pytest.raises(UserError) as caught:
        _load(tmp_path, "concurrency: 0\n")
    assert str(caught.value).endswith(
        "got 0; expected simultaneous requests the cluster should hold, 1-1000000 (e.g. 512)"
    )


def test_bad_workload_exits_2_from_the_cli(tmp_path):
    wl = tmp_path / "wl.yaml"
    wl.write_text("preset: chat\nconcurency: 8\n")
    out = subprocess.run(
        [
            *(sys.executable, "-m", "vfleet.cli.main", "plan"),
            *("--cluster", str(REPO / "examples/clusters/1x8-h100.yaml")),
            *("--model", "meta-llama/Llama-3.1-8B-Instruct", "--workload", str(wl)),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    expected = f"vfleet: error: {wl} line 2: concurency: unknown key: did you mean 'concurrency'?"
    assert out.stderr == expected + "\n"


def test_presets_fill_what_a_file_leaves_out(tmp_path):
    rag = PRESETS["rag"]
    got = _load(tmp_path, "preset: rag\ninput_len: {mean: 8000}\nslo: {tpot_p99_ms: 40.5}\n")
    assert got == Workload("wl", 8000, rag.input_p99, 256, 1024, 256, 4000, 40.5)
    # A raised mean lifts the preset's p99 with it, as before.
    assert _load(tmp_path, "input_len: {mean: 9000}\n").input_p99 == 9000
    assert _load(tmp_path, "input_len: null\nslo: {}\n") == Workload("wl", *_fields("chat"))


def _fields(preset: str) -> tuple:
    p = PRESETS[preset]
    lengths = (p.input_mean, p.input_p99, p.output_mean, p.output_p99)
    return (*lengths, p.concurrency, p.ttft_p99_ms, p.tpot_p99_ms)


def test_a_full_file_is_read_as_written():
    raw = {
        "preset": "batch",
        "input_len": {"mean": 1, "p99": 10_000_000},
        "output_len": {"mean": 7, "p99": 7},
        "concurrency": 1_000_000,
        "slo": {"ttft_p99_ms": 0.5, "tpot_p99_ms": 1e6},
    }
    assert workload_from_dict(raw, name="x") == Workload(
        "x", 1, 10_000_000, 7, 7, 1_000_000, 0.5, 1e6
    )


def test_preset_names_and_files(tmp_path):
    assert set(PRESET_NAMES) == set(PRESETS)
    assert load_workload("rag") is PRESETS["rag"] and load_workload(None) is PRESETS["chat"]
    with pytest.raises(UserError, match=r"neither a preset .*chat, rag, batch.* nor a file"):
        load_workload("chatt")
    with pytest.raises(UserError, match="is a directory: pass the file itself"):
        load_workload(str(tmp_path))


def test_a_dict_without_a_file_names_the_workload():
    with pytest.raises(UserError, match=r"^workload: concurrency: Input should be a valid int"):
        workload_from_dict({"concurrency": 2.5})


WORKLOAD_KEYS = ["preset", "input_len", "output_len", "concurrency", "slo", "mean", "p99"]
keys, values = document_values(
    [*WORKLOAD_KEYS, "ttft_p99_ms", "tpot_p99_ms"], ["chat", "rag", "batch", 10**6], width=3
)


@st.composite
def workload_mappings(draw):
    """Known sections with random contents, plus random keys."""
    raw = draw(st.dictionaries(keys, values, max_size=3))
    for section in ("input_len", "output_len", "slo"):
        if draw(st.booleans()):
            raw[section] = draw(st.dictionaries(keys, values, max_size=3))
    return raw


@LOADER_SETTINGS
@given(st.one_of(workload_mappings(), values))
def test_generated_mappings_give_a_workload_or_one_user_error_line(raw):
    try:
        workload = workload_from_dict(raw)
    except UserError as exc:
        assert_one_line(str(exc))
        return
    assert 1 <= workload.input_mean <= workload.input_p99 <= 10_000_000
    assert 1 <= workload.output_mean <= workload.output_p99 <= 10_000_000
    assert 1 <= workload.concurrency <= 1_000_000
    assert workload.ttft_p99_ms > 0 and workload.tpot_p99_ms > 0

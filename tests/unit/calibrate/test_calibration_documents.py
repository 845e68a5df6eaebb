"""The ledger and the calibration as strict typed documents: `vfleet calibrate` reads each
ledger line through its model and `--calibration FILE` (estimate, plan) through the
calibration's, so a corrupted, hand-edited or hostile value is refused in one line naming
the file, the line or field and what to do (exit 2), never a traceback, a hang, or a number
no engine could measure reaching the fit; no calibration.json is written for one. A run
past estimate's own work cap is left out and named, and a good ledger still calibrates."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from support.bundles import deploy_context, h100_context
from support.cli_run import Result, vfleet
from support.hostile import assert_one_line
from support.ledger import RESULT, deploy_report, ledger_line, published_runs
from support.paths import REPO
from vfleet.calibrate import calibration
from vfleet.calibrate.calibration import EfficiencyValues, OverheadValues
from vfleet.calibrate.points import read_ledger
from vfleet.perf.fit import Efficiency, Overheads

CLUSTER = str(REPO / "examples/clusters/1x8-h200.yaml")
ESTIMATE = ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--layout", "TP1"]
ESTIMATE += ["--input-len", "128", "--output-len", "16", "--json"]

Line = dict[str, Any]


@pytest.fixture(scope="module")
def good_lines() -> list[Line]:
    """Three published runs of one node at three operating points, as the deploy writes them."""
    lines = [ledger_line(case) for case in published_runs()[:3]]
    points = {json.dumps(x["operating_point"], sort_keys=True) for x in lines}
    assert len(points) == 3
    return lines


def _bundle(tmp_path: Path) -> Any:
    """A prod bundle the CLI accepts, whose probe saw one 8 x H100 node."""
    ctx = h100_context(tmp_path)
    (ctx.root / "terraform").symlink_to(REPO / "terraform")
    return ctx


def _write_ledger(ctx: Any, lines: list[bytes]) -> Path:
    path = ctx.artifacts / "ledger.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def _encoded(line: Line) -> bytes:
    return json.dumps(line, ensure_ascii=False).encode()


def _calibrate(ctx: Any) -> Result:
    return vfleet("calibrate", "--env", "prod", "--root", str(ctx.root))


def _refused(got: Result, *fragments: str) -> None:
    assert got.returncode == 2, (got.returncode, got.stdout[-300:], got.stderr[-600:])
    message = got.stderr.strip()
    assert_one_line(message)
    assert message.startswith("vfleet: error: "), message
    assert "Traceback" not in got.stderr
    for fragment in fragments:
        assert fragment in message, (fragment, message)


# Ledger lines ------------------------------------------------------------------------------


def _op(key: str, value: Any) -> Callable[[Line], bytes]:
    def change(line: Line) -> bytes:
        line["operating_point"][key] = value
        return _encoded(line)

    return change


def _measured(key: str, value: Any) -> Callable[[Line], bytes]:
    def change(line: Line) -> bytes:
        line["measured"][key] = value
        return json.dumps(line).encode()  # NaN and Infinity as Python's json writes them

    return change


def _text(old: str, new: str) -> Callable[[Line], bytes]:
    def change(line: Line) -> bytes:
        text = json.dumps(line)
        assert old in text
        return text.replace(old, new, 1).encode()

    return change


def _top(key: str, value: Any) -> Callable[[Line], bytes]:
    def change(line: Line) -> bytes:
        line[key] = value
        return json.dumps(line).encode()  # control characters as \u escapes, valid JSON

    return change


def _raw(section: str, key: str, text: str) -> Callable[[Line], bytes]:
    """The value written as `text`, a number Python would not write (1e400, 5,000 digits)."""

    def change(line: Line) -> bytes:
        line[section][key] = 123456.25
        return json.dumps(line).replace("123456.25", text, 1).encode()

    return change


BAD_LINES: dict[str, tuple[Callable[[Line], bytes], str]] = {
    "a billion prompts": (_op("num_prompts", 10**9), "operating_point.num_prompts"),
    "input_len 10**30": (_op("input_len", 10**30), "operating_point.input_len"),
    "a 5,000-digit integer": (_raw("operating_point", "input_len", "9" * 5000), "4300 digits"),
    "NaN tok/s": (_measured("output_tokens_per_s", math.nan), "NaN is not a number JSON"),
    "infinite tok/s": (_measured("output_tokens_per_s", math.inf), "Infinity is not a number"),
    "1e400 tok/s (read as infinity)": (
        _raw("measured", "output_tokens_per_s", "1e400"),
        "Input should be a finite number",
    ),
    "1e308 tok/s": (_measured("output_tokens_per_s", 1e308), "measured.output_tokens_per_s"),
    "1e9 tok/s from one TP1 engine": (
        _measured("output_tokens_per_s", 1e9),
        "outside what this run could measure",
    ),
    "1e-12 tok/s": (_measured("output_tokens_per_s", 1e-12), "outside what this run could"),
    "true as tok/s": (_measured("output_tokens_per_s", True), "measured.output_tokens_per_s"),
    "a string as tok/s": (_measured("output_tokens_per_s", "2901.1"), "valid number"),
    "a negative TPOT": (_measured("tpot_ms_median", -5.0), "measured.tpot_ms_median"),
    "a TPOT of 1e-300 ms": (_measured("tpot_ms_median", 1e-300), "0 (not measured) or at"),
    "a TTFT of 7 hours": (_measured("ttft_ms_median", 7 * 3600e3), "ttft_ms_median"),
    "an unknown key": (_top("tok_per_s", 1), "tok_per_s: Extra inputs are not permitted"),
    "an unknown measured key": (_measured("gpu_temp", 1), "measured.gpu_temp"),
    "an unknown schema": (_top("schema", "vfleet.ledger/9"), "schema: must be one of"),
    "a control character in the engine": (_top("engine", "e\x1b[31m"), "control characters"),
    "gpu_memory_utilization 5": (_op("gpu_memory_utilization", 5), "gpu_memory_utilization"),
    "an unknown dataset": (_op("dataset", "mystery"), "operating_point.dataset"),
    "an unknown KV cache dtype": (_op("kv_cache_dtype", "fp3"), "operating_point.kv_cache"),
    "a list where the mapping belongs": (_top("measured", [1, 2]), "measured"),
    "a key given twice": (_text('"engine": ', '"engine": "x", "engine": '), "appears twice"),
    "a truncated line": (lambda line: _encoded(line)[:40], "not JSON"),
    "not UTF-8": (lambda line: b"\xff\xfe" + _encoded(line), "not UTF-8"),
    "100k nested brackets": (lambda _: b"[" * 100_000 + b"]" * 100_000, "a line of 200,000"),
    "30k nested brackets": (lambda _: b"[" * 30_000 + b"]" * 30_000, "nests too deep"),
    "a line that is a list": (lambda _: b"[1, 2]", "valid dictionary"),
}


@pytest.mark.parametrize("case", BAD_LINES)
def test_a_bad_ledger_line_is_refused_with_its_line(case, good_lines, tmp_path):
    ctx = _bundle(tmp_path)
    change, fragment = BAD_LINES[case]
    bad = change(copy.deepcopy(good_lines[0]))
    _write_ledger(ctx, [*(_encoded(x) for x in good_lines), bad])
    got = _calibrate(ctx)
    _refused(got, "ledger.jsonl:4: ", "remove or fix that line", fragment)
    assert not (ctx.artifacts / "calibration.json").exists()


def _over_cap(line: Line, **op: int) -> Line:
    out = copy.deepcopy(line)
    out["operating_point"].update(op)
    return out


def test_a_good_ledger_calibrates_and_names_the_runs_it_left_out(good_lines, tmp_path):
    ctx = _bundle(tmp_path)
    first = copy.deepcopy(good_lines[0])
    # A valid line whose string holds U+2028: one line for JSON, two for str.splitlines.
    first["notes"] = ["measured\u2028again\u2029here"]
    unmeasured = copy.deepcopy(good_lines[1])
    unmeasured["measured"].update(output_tokens_per_s=0.0, tpot_ms_median=0.0)
    lines = [
        first,
        *good_lines[1:],
        # Past estimate's replay caps: 2e7 decoded tokens; 1.6e6 prefill chunks.
        _over_cap(good_lines[0], num_prompts=200_000, output_len=100),
        _over_cap(
            good_lines[0],
            num_prompts=200_000,
            input_len=16_000,
            output_len=4,
            max_num_batched_tokens=2048,
        ),
        unmeasured,  # vllm bench serve's 0 when nothing completed: left out, not refused
    ]
    _write_ledger(ctx, [_encoded(x) for x in lines])
    got = _calibrate(ctx)
    assert got.returncode == 0, got.stderr
    assert "left out 3 ledger line(s):" in got.stdout
    out = got.stdout.splitlines()
    (decode,) = [x for x in out if "(ledger line 4)" in x]
    assert "200,000 prompts x 100 output tokens is 20,000,000 tokens to replay" in decode
    (prefill,) = [x for x in out if "(ledger line 5)" in x]
    assert "1,600,000 prefill steps, more than the 1,000,000 an estimate takes" in prefill
    (nothing,) = [x for x in out if "(ledger line 6)" in x]
    assert "no measured output tokens/s" in nothing
    doc = json.loads((ctx.artifacts / "calibration.json").read_text())
    assert doc["runs"] == 3
    fit, line = calibration.load(ctx.artifacts / "calibration.json")
    assert "calibrated on 3 run(s) of prod" in line and fit.source.endswith("calibration.json")


def test_too_few_runs_after_the_cap_is_refused_in_one_line(good_lines, tmp_path):
    ctx = _bundle(tmp_path)
    lines = [good_lines[0], _over_cap(good_lines[1], num_prompts=200_000, output_len=100)]
    _write_ledger(ctx, [_encoded(x) for x in lines])
    _refused(_calibrate(ctx), "too little data", "tokens to replay", "(ledger line 2)")
    assert not (ctx.artifacts / "calibration.json").exists()


@pytest.mark.parametrize(
    "changes",
    [
        {"output_throughput": math.nan, "median_tpot_ms": math.inf},
        {"num_prompts": 10**9, "date": 5, "vfleet_run_id": ["x"]},
        {"completed": "40", "max_concurrency": "eight"},
        {"total_input_tokens": 1e300},
    ],
    ids=["non-finite", "absurd-counts", "strings", "huge-lengths"],
)
def test_a_deploy_writes_lines_calibrate_reads_back(changes, tmp_path):
    """Whatever a `vllm bench serve` result holds, the line the deploy writes is one
    calibrate reads: a value no run measures is recorded as missing, an operating point
    past estimate's limits as a note."""
    ctx = deploy_context(tmp_path, {})
    deploy_report(ctx, "with-page", **changes)
    (line,) = read_ledger(ctx.artifacts / "ledger.jsonl")
    if "num_prompts" in changes or "total_input_tokens" in changes:
        assert line.operating_point is None
        assert any("no operating point recorded" in n for n in line.notes), line.notes
    if "output_throughput" in changes:
        assert line.measured.output_tokens_per_s is None
    if "completed" in changes:  # no count of completed requests: no lengths, no point
        assert line.measured.completed is None and line.operating_point is None


def test_the_deploys_own_line_reads_back_whole(tmp_path):
    ctx = deploy_context(tmp_path, {})
    (entry,), _ = deploy_report(ctx, "with-page")
    (line,) = read_ledger(ctx.artifacts / "ledger.jsonl")
    assert line.model_dump(by_alias=True, exclude_unset=True) == entry
    assert line.measured.output_tokens_per_s == RESULT["output_throughput"]


# Calibration documents ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def calibrated(good_lines, tmp_path_factory) -> dict[str, Any]:
    ctx = _bundle(tmp_path_factory.mktemp("calibrated"))
    _write_ledger(ctx, [_encoded(x) for x in good_lines])
    got = _calibrate(ctx)
    assert got.returncode == 0, got.stderr
    doc: dict[str, Any] = json.loads((ctx.artifacts / "calibration.json").read_text())
    return doc


def _parent(doc: Any, path: str) -> tuple[Any, str]:
    """The mapping or list that holds the dotted `path`'s last part, and that part."""
    *parents, last = path.split(".")
    for key in parents:
        doc = doc[int(key)] if isinstance(doc, list) else doc[key]
    return doc, last


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        parent, last = _parent(doc, path)
        parent[last] = value

    return change


def _rename(path: str, new: str) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        parent, last = _parent(doc, path)
        parent[new] = parent.pop(last)

    return change


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda doc: doc.pop(key)


KNOWN_GPUS = "known: ada, ampere, blackwell, cdna3, cdna4, hopper"
BAD_DOCS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "score as a list": (_set("score", [1, 2]), "score: Input should be"),
    "efficiency as a list": (_set("fit.efficiency", [1, 2]), "fit.efficiency: Input should"),
    "overheads of v1 as a list": (_set("fit.overheads.v1", [1]), "fit.overheads.v1: Input"),
    "an efficiency of 50": (_set("fit.efficiency.hopper.gemm", 50), "hopper.gemm"),
    "an efficiency of 999999": (_set("fit.efficiency.hopper.hbm", 999999), "hopper.hbm"),
    "an efficiency of 0": (_set("fit.efficiency.hopper.kv_read", 0), "greater than 0"),
    "an all-to-all share of 1e-12": (_set("fit.efficiency.hopper.a2a", 1e-12), "hopper.a2a"),
    "true as a share": (_set("fit.efficiency.hopper.a2a", True), "valid number"),
    "a step overhead of 999999 s": (_set("fit.overheads.v1.step_s", 999999), "v1.step_s"),
    "a request overhead of 0.5 s": (_set("fit.overheads.v1.request_s", 0.5), "v1.request_s"),
    "an unknown GPU generation": (_rename("fit.efficiency.hopper", "volta"), KNOWN_GPUS),
    "an unknown engine generation": (_rename("fit.overheads.v1", "v2"), "known: v0, v0.6, v1"),
    "an unknown efficiency": (_set("fit.efficiency.hopper.gemm2", 0.5), "Extra inputs"),
    "an unknown key": (_set("comment", "hand-tuned"), "comment: Extra inputs"),
    "no fit": (_drop("fit"), "fit: Field required"),
    "runs that disagree with the table": (_set("runs", 99), "runs is 99 but runs_table"),
    "true as runs": (_set("runs", True), "runs: Input should be a valid integer"),
    "an unknown environment": (_set("env", "moon"), "env: must be one of"),
    "a time that is not one": (_set("fitted_at", "yesterday"), "ISO 8601"),
    "a measured 1e308 tok/s": (_set("runs_table.0.measured_tok_s", 1e308), "measured_tok_s"),
}


def _estimate(path: Path) -> Result:
    return vfleet("estimate", "--cluster", CLUSTER, *ESTIMATE, "--calibration", str(path))


@pytest.mark.parametrize("case", BAD_DOCS)
def test_a_bad_calibration_is_refused_in_one_line(case, calibrated, tmp_path):
    change, fragment = BAD_DOCS[case]
    doc = copy.deepcopy(calibrated)
    change(doc)
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(doc))
    got = _estimate(path)
    _refused(got, str(path), "not a valid calibration", "re-run `vfleet calibrate", fragment)
    assert got.stdout == ""


@pytest.mark.parametrize(
    "text, fragment",
    [
        ('{"schema": "vfleet.calibration/1", "runs": NaN}', "NaN is not a number JSON allows"),
        ("[" * 100_000 + "]" * 100_000, "nests too deep"),
        ('{"schema": "vfleet.calibration/0"}', "not a vfleet calibration"),
        ('{"schema": "vfleet.calibration/1",', "not JSON"),
    ],
    ids=["NaN", "100k-brackets", "other-schema", "truncated"],
)
def test_a_calibration_that_is_no_document_is_refused(text, fragment, tmp_path):
    path = tmp_path / "calibration.json"
    path.write_text(text)
    _refused(_estimate(path), str(path), fragment)


def test_a_changed_value_must_be_the_fits(calibrated, tmp_path):
    doc = copy.deepcopy(calibrated)
    key = next(k for k in doc["changed"] if k.startswith("overheads/"))
    doc["changed"][key][1] *= 3
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(doc))
    _refused(_estimate(path), "is not the value the fit section holds", key)


def test_plan_refuses_a_bad_calibration_too(calibrated, tmp_path):
    doc = copy.deepcopy(calibrated)
    doc["fit"]["overheads"]["v1"]["step_s"] = 999999
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(doc))
    got = vfleet("plan", "--cluster", CLUSTER, "--model", ESTIMATE[1], "--calibration", str(path))
    _refused(got, "fit.overheads.v1.step_s")


def test_the_calibration_written_is_the_one_estimate_takes(calibrated, tmp_path):
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(calibrated))
    got = _estimate(path)
    assert got.returncode == 0, got.stderr
    assert "calibrated on 3 run(s) of prod" in got.stderr
    assert json.loads(got.stdout)["parameters"]["source"] == str(path)


def test_the_models_hold_every_fitted_parameter():
    """A parameter added to the estimator must be added to the calibration's model too,
    else a calibration that carries it would be refused."""
    assert set(EfficiencyValues.model_fields) == {f.name for f in fields(Efficiency)}
    assert set(OverheadValues.model_fields) == {f.name for f in fields(Overheads)}

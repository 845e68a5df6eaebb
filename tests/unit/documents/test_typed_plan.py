"""The plan is one typed model (vfleet.documents.plan.Plan) from the planner to render, the
report, the ledger and doctor: nothing in the package reads a plan's fields by string key
outside that module, what the planner makes survives JSON and comes back equal, and
`vfleet plan` refuses a bad cluster file before it imports the planner."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from typing import Any

import pytest

from support.cli_run import vfleet
from support.degraded_links import degraded_cluster, plan_degraded
from support.paths import REPO
from vfleet.budget.speculative import Speculative as SpeculativeChoice
from vfleet.catalog.models import load_model
from vfleet.catalog.releases import traits
from vfleet.cli.doctor_command import config_from_plan
from vfleet.documents.plan import DOCUMENT_ORDER, Plan, load_plan, parse_plan
from vfleet.errors import UserError
from vfleet.inputs.files import Document
from vfleet.plan.make import PlanRequest, make_plan
from vfleet.plan.search import Pinned
from vfleet.plan.workload import load_workload
from vfleet.probe.load import load_cluster

SRC = REPO / "controller" / "src" / "vfleet"
CLUSTERS = REPO / "examples" / "clusters"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
V3 = "deepseek-ai/DeepSeek-V3"

# ---- no string-keyed plan access outside vfleet.documents.plan ---------------------------------

PLAN_NAMES = {"plan", "plan_doc", "reference_plan"}  # what the package calls a plan
PLAN_ATTRS = {"plan", "document", "reference_plan"}  # result.plan, inputs.reference_plan
PLAN_CALLS = {"load_plan", "parse_plan", "plan_document", "document"}  # plan.document()


def _called(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")


def _is_plan(node: ast.expr, bound: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in PLAN_NAMES or node.id in bound
    if isinstance(node, ast.Attribute):
        return node.attr in PLAN_ATTRS
    return isinstance(node, ast.Call) and _called(node) in PLAN_CALLS


Scope = ast.Module | ast.FunctionDef | ast.AsyncFunctionDef


def _own(scope: Scope) -> list[ast.AST]:
    """The nodes of one scope, not those of the functions and classes inside it."""
    out: list[ast.AST] = []
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        out.append(node)
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            todo += ast.iter_child_nodes(node)
    return out


def _pairs(node: ast.Assign) -> list[tuple[ast.expr, ast.expr]]:
    """(name, value) of an assignment, `a, b = x, y` taken pairwise."""
    out = []
    for target in node.targets:
        if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
            out += zip(target.elts, node.value.elts, strict=False)
        else:
            out.append((target, node.value))
    return out


def _bound(scope: Scope) -> set[str]:
    """The names bound to a plan in one scope: parameters annotated `Plan`, and names
    assigned a plan (`doc = result.document`), followed through chains of assignments."""
    names: set[str] = set()
    if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        params = [*scope.args.posonlyargs, *scope.args.args, *scope.args.kwonlyargs]
        names |= {
            a.arg
            for a in params
            if a.annotation is not None and re.search(r"\bPlan\b", ast.unparse(a.annotation))
        }
    while True:
        more = {
            target.id
            for node in _own(scope)
            if isinstance(node, ast.Assign)
            for target, value in _pairs(node)
            if isinstance(target, ast.Name) and _is_plan(value, names)
        }
        if more <= names:
            return names
        names |= more


def string_keyed(source: str) -> list[int]:
    """The lines of `source` that index a plan (`plan[...]`) or call `.get` on one."""
    tree = ast.parse(source)
    functions = (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))
    lines = set()
    for scope in [tree, *functions]:
        bound = _bound(scope)
        for node in _own(scope):
            if isinstance(node, ast.Subscript):
                target: ast.expr | None = node.value
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                target = node.func.value if node.func.attr == "get" else None
            else:
                target = None
            if target is not None and _is_plan(target, bound):
                lines.add(node.lineno)
    return sorted(lines)


def test_the_scan_finds_each_way_of_reading_a_plan_by_key():
    source = (
        "def a(plan):\n    return plan['model']\n"
        "def b(result):\n    doc, n = result.document, 1\n    same = doc\n"
        "    return same.get('gpu')\n"
        "def c(p: Plan | None):\n    return p['hosts']\n"
        "def d(path):\n    return load_plan(path)['model']\n"
        "def e(run):\n    return run.plan.get('block_size')\n"
        "def f(result):\n    return result.plan.document()['reason']\n"
        "def fine(plan: Plan, table: dict, doc: dict):\n"
        "    return plan.model, plan.hosts[0], table['model'], doc['schema']\n"
    )
    assert string_keyed(source) == [2, 6, 8, 10, 12, 14]


def test_no_module_reads_a_plan_by_string_key_outside_the_plan_model():
    found = {
        str(path.relative_to(SRC)): lines
        for path in sorted(SRC.rglob("*.py"))
        if path != SRC / "spec" / "plan.py"
        and (lines := string_keyed(path.read_text(encoding="utf-8")))
    }
    assert not found, f"read the Plan's attributes instead: {found}"


# ---- the planner's Plan survives JSON -------------------------------------------------------


def _round_trip(plan: Plan) -> Plan:
    text = json.dumps(plan.document(), indent=2)
    back = parse_plan(Document(json.loads(text), "plan.json"))
    assert back == plan
    assert back.model_fields_set == plan.model_fields_set
    assert back.document() == plan.document()
    assert json.dumps(back.document(), indent=2) == text
    return back


def _request(cluster: str, model: str, **extra: Any) -> PlanRequest:
    return PlanRequest(
        spec=load_model(model),
        cluster=load_cluster(CLUSTERS / cluster),
        workload=extra.pop("workload", load_workload("chat")),
        traits=traits(None),
        **extra,
    )


@pytest.mark.parametrize(
    ("cluster", "model"),
    [("1x8-h100.yaml", LLAMA), ("2x8-h200-ib.yaml", V3), ("2x8-h100-25gbe.yaml", V3)],
)
def test_the_planners_plan_comes_back_from_json_equal(cluster, model):
    plan = make_plan(_request(cluster, model)).plan
    back = _round_trip(plan)
    assert isinstance(back.predicted, type(plan.predicted)) and back.alternatives
    assert back.rejected and back.workload and back.workload.name == "chat"
    assert "speculative" not in back.model_fields_set  # off: absent, as it always was


def test_speculative_pins_and_a_workload_file_come_back_equal(tmp_path):
    workload = tmp_path / "slo.yaml"
    workload.write_text("slo: {ttft_p99_ms: 1500}\n")
    mtp = SpeculativeChoice("mtp", 1)
    pinned = Pinned(max_model_len=4096, max_num_seqs=48)
    request = _request(
        "2x8-h200-ib.yaml", V3, workload=load_workload(str(workload)), speculative=mtp
    )
    plain = make_plan(request).plan
    pinned_plan = make_plan(_request("1x8-h100.yaml", LLAMA, pinned=pinned)).plan
    back = _round_trip(plain)
    assert back.speculative is not None and back.speculative.method == "mtp"
    assert "draft_model" not in back.speculative.model_fields_set
    assert back.workload is not None and back.workload.ttft_p99_ms == 1500.0
    assert isinstance(back.workload.ttft_p99_ms, float)  # as the file gave it, not 1500
    assert isinstance(back.workload.tpot_p99_ms, int)  # the preset's 50, not 50.0
    pinned_back = _round_trip(pinned_plan)
    assert pinned_back.overrides == {"max_model_len": 4096, "max_num_seqs": 48}
    assert (pinned_back.max_model_len, pinned_back.max_num_seqs) == (4096, 48)


def test_degraded_links_come_back_typed():
    plan = plan_degraded(degraded_cluster("h2")).plan
    back = _round_trip(plan)
    assert back.degraded_links and back.degraded_links[0].host == "h2"


def test_the_file_keeps_the_planners_key_order(tmp_path):
    out = tmp_path / "plan.json"
    made = vfleet("plan", "--cluster", str(CLUSTERS / "1x8-h100.yaml"), "--model", LLAMA,
                  "--out", str(out), "--json")  # fmt: skip
    assert made.returncode == 0, made.stderr
    written = json.loads(out.read_text())
    assert out.read_text() == json.dumps(written, indent=2) + "\n"
    assert made.stdout == json.dumps(written, indent=2) + "\n"  # --json prints the same
    order = [k for k in DOCUMENT_ORDER if k in written]
    assert list(written) == order and list(written)[:3] == ["model", "model_type", "gpu"]
    assert sorted(DOCUMENT_ORDER) == sorted(Plan.model_fields)  # every field, once
    assert load_plan(out).document() == written


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda d: d["predicted"].update(tokens_per_sec=1), "predicted.tokens_per_sec: unknown"),
        (lambda d: d["alternatives"][0].update(why_not=7), "alternatives[0].why_not"),
        (lambda d: d["workload"].update(concurrency="many"), "workload.concurrency"),
        (lambda d: d["rejected"].append({"layout": "TP3"}), "rejected[-1].why"),
    ],
)
def test_a_hand_edit_in_a_report_section_is_named(edit, needle):
    doc = make_plan(_request("1x8-h100.yaml", LLAMA)).plan.document()
    edit(doc)
    needle = needle.replace("[-1]", f"[{len(doc['rejected']) - 1}]")
    with pytest.raises(UserError, match=re.escape(needle)):
        parse_plan(Document(doc, "plan.json"))


# ---- doctor trusts only the settings the file holds --------------------------------------


def test_doctor_takes_chunked_prefill_only_from_a_plan_that_says_it(tmp_path):
    doc = make_plan(_request("1x8-h100.yaml", LLAMA)).plan.document()
    path = tmp_path / "plan.json"
    # Without chunked prefill a step must hold a whole prompt (vfleet.documents.plan checks it).
    whole = {"max_num_batched_tokens": max(doc["max_num_batched_tokens"], doc["max_model_len"])}
    for value in (True, False):
        path.write_text(json.dumps({**doc, **whole, "enable_chunked_prefill": value}))
        assert config_from_plan(load_plan(path)).enable_chunked_prefill is value
    path.write_text(json.dumps({k: v for k, v in doc.items() if k != "enable_chunked_prefill"}))
    plan = load_plan(path)
    assert plan.enable_chunked_prefill is True  # render's default: the flag is written
    assert config_from_plan(plan).enable_chunked_prefill is None  # doctor's: unknown
    assert config_from_plan(plan).max_num_seqs == doc["max_num_seqs"]


# ---- a bad cluster file is refused before the planner is imported ------------------------


def test_a_bad_cluster_file_is_refused_before_the_planner_is_imported(tmp_path):
    bad = tmp_path / "cluster.yaml"
    bad.write_text("nodes: eight\n")
    probe = (
        "import sys\n"
        "from vfleet.cli.main import main\n"
        f"code = main(['plan', '--cluster', {str(bad)!r}, '--model', 'x'])\n"
        "heavy = [m for m in ('numpy', 'vfleet.plan.search', 'vfleet.calibrate.calibration')\n"
        "         if m in sys.modules]\n"
        "print(code, heavy)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.strip() == "2 []", done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "nodes" in done.stderr, done.stderr

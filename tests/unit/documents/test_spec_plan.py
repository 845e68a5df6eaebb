"""The plan model (vfleet.documents.plan): every plan the planner writes loads, hand edits that
vLLM would refuse are named in one line, and no input makes load_plan raise anything but
UserError."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.paths import REPO
from vfleet.cli import main as cli
from vfleet.documents.plan import Plan, load_plan, parse_plan
from vfleet.errors import UserError
from vfleet.inputs.files import Document

CLUSTERS = REPO / "examples" / "clusters"
EXAMPLES = [
    ("1x8-h100.yaml", "meta-llama/Llama-3.1-8B-Instruct"),
    ("2x8-h100-25gbe.yaml", "deepseek-ai/DeepSeek-V3"),
    ("2x8-h200-ib.yaml", "meta-llama/Llama-3.1-70B-Instruct"),
]


def _plan(tmp_path: Path, cluster: str, model: str) -> Path:
    out = tmp_path / f"{cluster}.plan.json"
    cli.main(["plan", "--cluster", str(CLUSTERS / cluster), "--model", model, "--out", str(out)])
    return out


@pytest.fixture(scope="module")
def valid(tmp_path_factory) -> dict:
    path = _plan(tmp_path_factory.mktemp("plan"), *EXAMPLES[0])
    return json.loads(path.read_text())


@pytest.mark.parametrize(("cluster", "model"), EXAMPLES)
def test_the_planners_plans_load_unchanged(tmp_path, cluster, model, capsys):
    path = _plan(tmp_path, cluster, model)
    capsys.readouterr()
    assert load_plan(path).document() == json.loads(path.read_text())  # nothing added or lost


def _refused(plan: dict, needle: str) -> str:
    with pytest.raises(UserError) as info:
        parse_plan(Document(plan, "plan.json"))
    message = str(info.value)
    assert message.startswith("plan.json: ") and "\n" not in message
    assert needle in message, message
    return message


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (
            lambda d: d.update(max_num_seq=8),
            "max_num_seq: unknown key: did you mean 'max_num_seqs'?",
        ),
        (lambda d: d.update(gpu_memory_utilization=0), "gpu_memory_utilization: Input should be"),
        (lambda d: d.update(gpu_memory_utilization=float("nan")), "gpu_memory_utilization"),
        (lambda d: d.update(block_size=24), "block_size: must be one of 1, 8, 16"),
        (lambda d: d.update(block_size=True), "block_size: Input should be a valid integer"),
        (lambda d: d.update(max_num_seqs=0), "max_num_seqs: Input should be greater than"),
        (lambda d: d.update(max_model_len=10**12), "max_model_len: Input should be less than"),
        (lambda d: d.update(tensor_parallel_size=2048), "tensor_parallel_size: Input should be"),
        (lambda d: d.update(max_num_batched_tokens=1, max_num_seqs=2), "is below max_num_seqs (2)"),
        (
            lambda d: d.update(
                enable_chunked_prefill=False, max_num_batched_tokens=300, max_num_seqs=2
            ),
            "without chunked prefill must cover max_model_len",
        ),
        (lambda d: d["hosts"][0].update(host="../etc"), "hosts[0].host: must be an RFC 1123"),
        (
            lambda d: d["hosts"][0]["engines"].update({"a;rm -rf": []}),
            "must be an RFC 1123 label",
        ),
        (lambda d: d["hosts"].append(copy.deepcopy(d["hosts"][0])), "appears twice"),
        (
            lambda d: d["hosts"][0]["engines"]["0"][0].update(tp_rank=999),
            "(or a rank out of range): re-run `vfleet plan --out`",
        ),
        (lambda d: d.update(vllm_version="0.11"), "vllm_version: must be a vLLM release"),
        (
            lambda d: d.update(speculative={"method": "eagle", "num_speculative_tokens": 2}),
            "needs a draft_model",
        ),
        (lambda d: d.update(speculative={"method": "mtp", "num_speculative_tokens": 17}), "16"),
        (lambda d: d.pop("kv_cache_dtype"), "kv_cache_dtype: is missing"),
    ],
)
def test_bad_plans_name_the_field(valid, edit, needle):
    plan = copy.deepcopy(valid)
    edit(plan)
    _refused(plan, needle)


def test_a_plan_that_is_not_an_object(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text("[1, 2]")
    with pytest.raises(UserError, match="is not a vfleet plan"):
        load_plan(path)
    with pytest.raises(UserError, match="no plan at"):
        load_plan(tmp_path / "missing.json")


def test_zero_memory_utilization_is_refused_not_replaced(tmp_path):
    """0 used to become the release default (0.92) in the planner and the budget."""
    from vfleet.budget.compute import BudgetRequest, compute
    from vfleet.budget.params import Layout
    from vfleet.catalog.gpus import resolve_gpu
    from vfleet.catalog.models import load_model
    from vfleet.catalog.releases import traits

    req = BudgetRequest(
        spec=load_model("meta-llama/Llama-3.1-8B-Instruct"),
        gpu=resolve_gpu("H100-SXM-80GB"),
        traits=traits("0.11.1"),
        layout=Layout(tp=1, pp=1, dp=1),
        gpu_memory_utilization=0.0,
    )
    with pytest.raises(UserError, match="must be in"):
        compute(req)


# ---- no input breaks load_plan --------------------------------------------------------------

HOSTILE = st.sampled_from(
    ["", "../../etc/passwd", "a b", "$(reboot)", "x" * 300, "gpu\n01", "-rf", "ü", "\x00"]
)
ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    HOSTILE,
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)


def _paths(value, path=()):
    yield path
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from _paths(sub, (*path, key))
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            yield from _paths(sub, (*path, i))


@st.composite
def mutated(draw, base: dict):
    plan = copy.deepcopy(base)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        paths = [p for p in _paths(plan) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = plan
        for step in path[:-1]:
            parent = parent[step]
        action = draw(st.sampled_from(["delete", "replace", "rename"]))
        if action == "delete":
            del parent[path[-1]]
        elif action == "replace":
            parent[path[-1]] = draw(ODD_VALUES)
        elif isinstance(parent, dict):
            parent[draw(HOSTILE)] = parent.pop(path[-1])
    return plan


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_mutated_plans_load_or_fail_in_one_line(valid, data):
    plan = data.draw(mutated(valid))
    try:
        checked = parse_plan(Document(plan, "plan.json"))
    except UserError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("plan.json")
        return
    assert isinstance(checked, Plan)
    assert 0 < checked.gpu_memory_utilization <= 1 and math.isfinite(checked.max_model_len)


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=200))
def test_any_file_text_is_a_plan_or_one_line(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("p") / "plan.json"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        load_plan(path)
    except UserError as exc:
        assert "\n" not in str(exc)

"""The budget engine against real vLLM start-up logs (tests/data/kv_cases, public sources)."""

import json
import statistics

from support.paths import DATA
from vfleet.budget.compute import compute
from vfleet_devtools.kvcases import configs_by_case_model, to_run, usable

CASES = DATA / "kv_cases"


def _errors() -> dict[str, float]:
    cases = json.loads((CASES / "cases.json").read_text())["cases"]
    configs = configs_by_case_model(json.loads((CASES / "models.json").read_text()))
    out = {}
    for case in cases:
        if usable(case, configs):
            run = to_run(case, configs)
            predicted = compute(run.request).kv_tokens
            out[run.case_id] = abs(predicted - run.observed_tokens) / run.observed_tokens
    return out


def test_every_case_with_a_config_and_complete_record_is_scored():
    errors = _errors()
    assert len(errors) >= 30  # the acceptance set: 36 public cases today


def test_kv_tokens_median_and_mean_error_beat_the_targets():
    errors = list(_errors().values())
    assert statistics.median(errors) <= 0.005
    assert statistics.mean(errors) <= 0.02

"""The serving mode a deploy plans with: the group_vars value, checked as validate checks it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from vfleet.documents.deploy import DeployVars


@pytest.mark.parametrize("mode", ["auto", "aggregated", "disaggregated", "{{ site_mode }}"])
def test_each_serving_mode_and_a_jinja_value_are_accepted(mode):
    assert DeployVars.model_validate({"vfleet_serving_mode": mode}).vfleet_serving_mode == mode


@pytest.mark.parametrize("mode", ["pd", "Disaggregated", "", 1, True])
def test_anything_else_is_refused(mode):
    with pytest.raises(ValidationError, match="vfleet_serving_mode"):
        DeployVars.model_validate({"vfleet_serving_mode": mode})

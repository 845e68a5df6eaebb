"""The scheduler replay's KV accounting under preemption: what the running requests hold
is what the cache counts, never below zero or above its size, and a recomputed request's
earlier output is counted once (it is prefilled again as prompt)."""

from __future__ import annotations

import numpy as np
import pytest

from vfleet.perf import simulate
from vfleet.perf.simulate import Client, EngineLimits, replay


@pytest.fixture
def checked(monkeypatch):
    """Every step ends with the cache's count equal to what the requests hold, in range."""
    seen = {"steps": 0, "preempted": 0}
    finish = simulate._Scheduler.finish

    def finish_and_check(self, step):
        finish(self, step)
        held = sum(self.held)
        assert self.kv_used == held, (step, self.kv_used, held)
        assert 0 <= self.kv_used <= self.limits.kv_tokens, (step, self.kv_used)
        seen["steps"] += 1
        seen["preempted"] = self.preemptions

    monkeypatch.setattr(simulate._Scheduler, "finish", finish_and_check)
    return seen


@pytest.mark.parametrize("seed", range(6))
def test_kv_in_use_is_what_the_running_requests_hold(checked, seed):
    rng = np.random.default_rng(seed)
    n = 300
    inputs = rng.integers(16, 900, n)
    outputs = rng.integers(1, 600, n)
    limits = EngineLimits(
        max_num_seqs=128, max_num_batched_tokens=512, kv_tokens=6000, block_size=16
    )
    trajectory = replay(inputs, outputs, limits, Client(concurrency=None))
    assert checked["preempted"] > 50  # the cache is far too small: preemption is the case
    assert (trajectory.finish_step >= 0).all()
    # A decoding request's context is at most its prompt and all its output.
    assert trajectory.decode_context.max() <= trajectory.decode.max() * (900 + 600)


def test_a_recomputed_request_counts_its_earlier_output_once(checked):
    # Two long requests in a cache that holds one: the second is preempted, then finishes.
    limits = EngineLimits(max_num_seqs=4, max_num_batched_tokens=64, kv_tokens=260, block_size=16)
    trajectory = replay(
        np.array([100, 100]), np.array([120, 120]), limits, Client(concurrency=None)
    )
    assert trajectory.preemptions >= 1
    # One decoding request's context never passes prompt + output.
    assert trajectory.decode_context[trajectory.decode == 1].max() <= 100 + 120

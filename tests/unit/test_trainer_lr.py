"""The learning-rate schedule: warmup, then cosine to 10% over steps or, with a time budget, over time."""

import time

import pytest
import torch

from trtllm_spec.core.recipe import TrainingConfig
from trtllm_spec.train.samples import Schedule
from trtllm_spec.train.trainer import Trainer


def _trainer(tmp_path, **cfg) -> Trainer:
    tc = TrainingConfig(max_steps=100, warmup_steps=10, lr=1e-3, precision="fp32", **cfg)
    return Trainer(torch.nn.Linear(2, 2), tc, Schedule([], 1, 1, 0), [], tmp_path, log=lambda m: None)


def test_step_cosine_without_budget(tmp_path):
    t = _trainer(tmp_path)
    f = t.sched.lr_lambdas[0]
    assert f(0) == pytest.approx(1 / 11) and f(10) == pytest.approx(1.0)
    assert f(55) == pytest.approx(0.55) and f(100) == pytest.approx(0.1)
    t._time_progress = 0.9  # no budget: a clock reading cannot move the schedule
    assert t._progress_by_time() == 0.0


def test_time_budget_anneals_a_run_the_clock_ends(tmp_path):
    t = _trainer(tmp_path, time_budget_minutes=1.0)
    f = t.sched.lr_lambdas[0]
    t._time_progress = 0.5  # half the budget spent at step 20 of 100: the cosine is half way
    assert f(20) == pytest.approx(0.55)
    t._time_progress = 1.0
    assert f(20) == pytest.approx(0.1)
    t._time_progress = 0.0  # steps further along than the clock: steps decide
    assert f(55) == pytest.approx(0.55)


def test_progress_counts_the_step_in_flight(tmp_path):
    t = _trainer(tmp_path, time_budget_minutes=1.0)
    t.warm_elapsed = 0.0
    t.elapsed, t._step_started = 45.0, time.perf_counter()  # 45 s before this step, which has just begun
    assert 0.75 <= t._progress_by_time() < 0.8


def test_time_counts_from_the_end_of_warmup(tmp_path):
    """Warmup time is outside both clocks, so a steady run that fits its budget gets the step cosine exactly
    (before, warmup seconds put the clock ahead of the steps and the rate depended on the machine's timing)."""
    t = _trainer(tmp_path, time_budget_minutes=1.0)  # warmup 10 of 100 steps
    t.elapsed, t._step_started = 5.0, time.perf_counter()
    assert t._progress_by_time() == 0.0  # still in warmup: the clock does not count yet
    t.warm_elapsed = 6.0  # warmup took 6 s, at 0.6 s a step
    t.elapsed = 6.0 + 45 * 0.5  # then 45 steps at 0.5 s: 90 steps would take 45 s of the 54 s left
    assert t._progress_by_time() == pytest.approx(22.5 / 54, abs=1e-3) and 22.5 / 54 < 45 / 90
    t.elapsed = 6.0 + 45 * 0.7  # at 0.7 s a step 90 steps would not fit: the clock leads
    assert t._progress_by_time() == pytest.approx(31.5 / 54, abs=1e-3) and 31.5 / 54 > 45 / 90
    t.warm_elapsed = 70.0  # the whole budget went into warmup
    assert t._progress_by_time() == 1.0

import pytest

from trtllm_spec.errors import UserError
from trtllm_spec.planner.schedule import check_schedule, draft_len_at, render_schedule


def test_constant_d_has_no_schedule():
    assert render_schedule({1: 4, 8: 4, 64: 4}, "1.2") == (4, None)
    assert render_schedule({1: 0, 8: 0}, "1.3") == (0, None)


def test_12_lower_thresholds():
    d, s = render_schedule({1: 5, 8: 5, 32: 3, 64: 0}, "1.2")
    assert d == 5 and s == {1: 5, 32: 3, 64: 0}
    check_schedule(s, d, "1.2")
    assert [draft_len_at(s, d, "1.2", b) for b in (1, 8, 31, 32, 63, 64, 500)] == [5, 5, 5, 3, 3, 0, 0]


def test_13_upper_thresholds():
    d, s = render_schedule({1: 5, 8: 5, 32: 3, 64: 0}, "1.3", max_batch_size=64)
    assert d == 5 and s == {8: 5, 32: 3}  # bs <= 8 -> 5, 9..32 -> 3, above -> 0
    check_schedule(s, d, "1.3")
    assert [draft_len_at(s, d, "1.3", b) for b in (1, 8, 9, 32, 33, 64)] == [5, 5, 3, 3, 0, 0]


def test_13_last_run_extends_to_max_batch():
    d, s = render_schedule({1: 4, 16: 2}, "1.3", max_batch_size=256)
    assert s == {1: 4, 256: 2}
    assert draft_len_at(s, d, "1.3", 200) == 2


def test_values_never_exceed_smallest_batch_d():
    d, s = render_schedule({4: 2, 8: 6}, "1.2")
    assert d == 2 and s is None
    d, s = render_schedule({4: 3, 8: 6, 16: 1}, "1.2")
    assert d == 3 and s == {1: 3, 16: 1}


@pytest.mark.parametrize("s,d,p,match", [
    ({2: 4}, 4, "1.2", "include batch size 1"),
    ({1: 3}, 4, "1.2", "must equal max_draft_len"),
    ({1: 4, 8: 5}, 4, "1.3", "exceeds max_draft_len"),
    ({0: 4}, 4, "1.3", ">= 1"),
    ({}, 4, "1.3", "empty"),
])
def test_check_schedule_rejects(s, d, p, match):
    with pytest.raises(UserError, match=match):
        check_schedule(s, d, p)

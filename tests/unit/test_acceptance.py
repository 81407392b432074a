import json

import pytest

from trtllm_spec.errors import AcceptanceError
from trtllm_spec.planner.acceptance import acceptance_from_dict, chain, load_acceptance, table


def test_chain_formula():
    m = chain([0.8, 0.5, 0.5], "t")
    # AL(D) = 1 + sum_i prod_{j<=i} a_j
    assert m.acceptance_length(0) == 1.0
    assert m.acceptance_length(1) == pytest.approx(1.8)
    assert m.acceptance_length(2) == pytest.approx(1.8 + 0.4)
    assert m.acceptance_length(3) == pytest.approx(2.2 + 0.2)
    assert m.acceptance_length(7) == m.acceptance_length(3)  # never extrapolated beyond the measured positions


def test_table_interpolation_and_monotone():
    m = table({2: 2.0, 4: 3.0, 5: 2.9}, "t")
    assert m.acceptance_length(1) == pytest.approx(1.5)  # between (0, 1) and (2, 2)
    assert m.acceptance_length(3) == pytest.approx(2.5)
    assert m.acceptance_length(5) == pytest.approx(3.0)  # non-decreasing: the dip at 5 is not believed
    assert m.acceptance_length(9) == pytest.approx(3.0)


@pytest.mark.parametrize("data,match", [
    ({}, "needs 'conditional_rates'"),
    ({"conditional_rates": []}, "non-empty"),
    ({"conditional_rates": [0.5, 1.2]}, r"conditional_rates\[1\]"),
    ({"conditional_rates": [-0.1]}, "in \\[0, 1\\]"),
    ({"conditional_rates": ["x"]}, "not a rate"),
    ({"acceptance_length": {"1": 2.5}}, "outside \\[1, 1 \\+ D\\]"),
    ({"acceptance_length": {"0": 1.0}}, ">= 1"),
    ({"acceptance_length": {"a": 1.0}}, "not a draft length"),
    ({"acceptance_length": {"2": 0.5}}, "outside"),
    ({"acceptance_length": []}, "must map"),
])
def test_bad_acceptance(data, match):
    with pytest.raises(AcceptanceError, match=match):
        acceptance_from_dict(data, "acc.json")


def test_profile_file_with_categories(tmp_path):
    p = tmp_path / "speculation_profile.json"
    p.write_text(json.dumps({"overall": {"conditional_rates": [0.5]},
                             "categories": {"coding": {"conditional_rates": [0.9]}}}))
    assert load_acceptance(p).acceptance_length(1) == pytest.approx(1.5)
    assert load_acceptance(p, "coding").acceptance_length(1) == pytest.approx(1.9)
    with pytest.raises(AcceptanceError, match="no category 'math'.*coding"):
        load_acceptance(p, "math")
    (tmp_path / "bad.json").write_text("[1]")
    with pytest.raises(AcceptanceError, match="JSON object"):
        load_acceptance(tmp_path / "bad.json")

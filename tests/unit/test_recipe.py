from pathlib import Path

import pytest
import yaml

from trtllm_spec.core.recipe_load import apply_overrides, load_recipe, recipe_from_dict, recipe_to_dict
from trtllm_spec.drafters.eagle3.config import Eagle3Drafter
from trtllm_spec.errors import RecipeError

BASE = {"target": {"model": "llama-3.1-8b-instruct"}, "drafter": {"type": "eagle3"}}


def test_minimal_recipe_fills_defaults():
    r = recipe_from_dict(BASE)
    assert isinstance(r.drafter, Eagle3Drafter)
    assert r.draft_len == "auto" and r.workload.batch_sizes == [1, 8, 32, 64]
    assert r.trtllm_profile == "1.3"  # auto: the newest stable release that runs the drafter


def test_auto_is_the_newest_stable_release_that_runs_the_drafter_and_backend():
    """auto picks 1.3 (the first release that applies a draft_len_schedule, the stable profile newest), never 1.4
    (its pages leave the schedule floor open), and 1.2 for the TensorRT backend, which later releases removed."""
    from trtllm_spec.core.releases import auto_release

    model = {"draft_model": {"model": "llama-3.2-1b-instruct"}}
    for drafter in ("eagle3", "mtp", "draft_model", "ngram", "dflash", "dspark", "suffix", "eagle_mtp"):
        section = {"type": drafter, **model.get(drafter, {})}
        assert recipe_from_dict({**BASE, "drafter": section}).trtllm_profile == "1.3", drafter
    trt = recipe_from_dict({**BASE, "drafter": {"type": "draft_model", **model["draft_model"]},
                            "engine": {"backend": "tensorrt"}})
    assert trt.trtllm_profile == "1.2"
    assert auto_release("1.4") == "1.4"  # a drafter only a newer release runs: its own first release


def test_unknown_key_names_path_and_nearest_key():
    with pytest.raises(RecipeError) as e:
        recipe_from_dict({**BASE, "workload": {"batch_size": [1]}}, "r.yaml")
    msg = str(e.value)
    assert "workload.batch_size" in msg and "did you mean 'batch_sizes'" in msg


def test_unknown_key_inside_tagged_union():
    with pytest.raises(RecipeError, match=r"drafter\.num_layerz.*did you mean 'num_layers'"):
        recipe_from_dict({**BASE, "drafter": {"type": "eagle3", "num_layerz": 2}})


def test_unknown_drafter_type_lists_valid():
    with pytest.raises(RecipeError, match="eagle3.*ngram"):
        recipe_from_dict({**BASE, "drafter": {"type": "medusa"}})


def test_missing_drafter_type():
    with pytest.raises(RecipeError, match="drafter.type"):
        recipe_from_dict({**BASE, "drafter": {}})


@pytest.mark.parametrize("d", [0, -1, 65, "seven", True])
def test_draft_len_out_of_range(d):
    with pytest.raises(RecipeError, match="draft_len"):
        recipe_from_dict({**BASE, "draft_len": d})


def test_draft_len_above_planner_max():
    with pytest.raises(RecipeError, match="planner.max_draft_len"):
        recipe_from_dict({**BASE, "draft_len": 9})


def test_dflash_rules():
    with pytest.raises(RecipeError, match="not divisible by drafter.block_size"):
        recipe_from_dict({**BASE, "drafter": {"type": "dflash", "training": {"seq_len": 500}}})
    with pytest.raises(RecipeError, match="block_size - 1"):
        recipe_from_dict({**BASE, "drafter": {"type": "dflash", "block_size": 4}, "draft_len": 4})
    with pytest.raises(RecipeError, match="TensorRT-LLM 1.3"):
        recipe_from_dict({**BASE, "drafter": {"type": "dflash"}, "engine": {"trtllm_version": "1.2"}})
    assert recipe_from_dict({**BASE, "drafter": {"type": "dspark"}}).trtllm_profile == "1.3"


def test_parallelism_rules():
    with pytest.raises(RecipeError, match="exceeds num_gpus"):
        recipe_from_dict({**BASE, "hardware": {"tp": 4}})
    with pytest.raises(RecipeError, match="must divide tp"):
        recipe_from_dict({**BASE, "hardware": {"num_gpus": 8, "tp": 8, "ep": 3}})


def test_tensorrt_backend_only_for_draft_model():
    with pytest.raises(RecipeError, match="PyTorch-backend only"):
        recipe_from_dict({**BASE, "engine": {"backend": "tensorrt"}})


def test_overrides_typed_and_nested():
    data = apply_overrides(BASE, ["workload.isl=4096", "workload.batch_sizes=[1, 2]", "hardware.overrides.efficiency.gemm=0.7"])
    r = recipe_from_dict(data)
    assert r.workload.isl == 4096 and r.workload.batch_sizes == [1, 2]
    assert r.hardware.overrides == {"efficiency": {"gemm": 0.7}}


def test_override_changing_drafter_type_resets_section():
    data = apply_overrides({**BASE, "drafter": {"type": "eagle3", "draft_vocab_size": 32000}}, ["drafter.type=ngram"])
    assert recipe_from_dict(data).drafter.type == "ngram"


@pytest.mark.parametrize("bad", ["novalue", "=3", "a..b=1", "target.model.x=1"])
def test_bad_overrides(bad):
    with pytest.raises(RecipeError):
        apply_overrides(BASE, [bad])


def test_extends_and_relative_paths(tmp_path: Path):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump({"hardware": {"gpu": "h200"}, "workload": {"isl": 2048}}))
    (tmp_path / "r.yaml").write_text(yaml.safe_dump({"extends": "base.yaml", **BASE, "workload": {"osl": 64}}))
    r = load_recipe(tmp_path / "r.yaml")
    assert r.hardware.gpu == "h200" and r.workload.isl == 2048 and r.workload.osl == 64
    assert r.base_dir == tmp_path


def test_extends_cycle(tmp_path: Path):
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(RecipeError, match="cycle"):
        load_recipe(tmp_path / "a.yaml")


@pytest.mark.parametrize("text,match", [("", "empty"), ("[1, 2]", "mapping"), ("a: [", "not valid YAML"),
                                        ("a: b: c", "not valid YAML")])
def test_bad_yaml_files(tmp_path: Path, text, match):
    p = tmp_path / "r.yaml"
    p.write_text(text)
    with pytest.raises(RecipeError, match=match):
        load_recipe(p)


def test_yaml_bomb_rejected(tmp_path: Path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"] + [f"a{i}: &a{i} [" + ", ".join([f"*a{i-1}"] * 9) + "]"
                                                         for i in range(1, 12)]
    p = tmp_path / "bomb.yaml"
    p.write_text("\n".join(lines))
    with pytest.raises(RecipeError, match="aliases"):
        load_recipe(p)


def test_non_utf8_and_missing(tmp_path: Path):
    p = tmp_path / "r.yaml"
    p.write_bytes(b"target: \xff\xfe")
    with pytest.raises(RecipeError, match="UTF-8"):
        load_recipe(p)
    with pytest.raises(RecipeError, match="does not exist"):
        load_recipe(tmp_path / "nope.yaml")


def test_round_trip():
    r = recipe_from_dict({**BASE, "drafter": {"type": "dflash", "block_size": 8}, "draft_len": 7})
    again = recipe_from_dict(yaml.safe_load(yaml.safe_dump(recipe_to_dict(r))))
    assert recipe_to_dict(again) == recipe_to_dict(r)


def test_fields_once_accepted_and_ignored_are_refused_or_honoured():
    """Recipe-field audit (issue 13): workload.temperature was read by nothing and is now an unknown key;
    drafter.convert_from and output.dir are honoured (tests/unit/test_convert.py, tests/cli/test_cli_build.py)."""
    with pytest.raises(RecipeError, match="workload.temperature"):
        recipe_from_dict({**BASE, "workload": {"temperature": 0.7}})
    with pytest.raises(RecipeError, match="keep one"):
        recipe_from_dict({**BASE, "drafter": {"type": "eagle3", "checkpoint": "a",
                                              "convert_from": {"format": "eagle", "path": "b"}}})


def test_measure_draft_len_is_what_the_build_measures_at(tmp_path: Path):
    from trtllm_spec.core.targets import resolve_target
    from trtllm_spec.errors import UserError
    from trtllm_spec.stages.context import BuildContext
    from trtllm_spec.stages.measure import measure_draft_len

    def ctx_for(extra):
        recipe = recipe_from_dict({**BASE, **extra})
        return BuildContext(recipe=recipe, recipe_file=tmp_path / "r.yaml", bundle=tmp_path, cache=None,
                            force=False, log=print, target=resolve_target(BASE["target"]["model"]))

    assert measure_draft_len(ctx_for({})) == 8  # the largest D the planner considers
    assert measure_draft_len(ctx_for({"measure": {"draft_len": 4}})) == 4
    assert measure_draft_len(ctx_for({"draft_len": 3, "measure": {"draft_len": 5}})) == 5
    with pytest.raises(RecipeError, match="measure.draft_len = 2 is below draft_len = 3"):
        recipe_from_dict({**BASE, "draft_len": 3, "measure": {"draft_len": 2}})
    with pytest.raises(RecipeError, match="drop measure.draft_len"):
        recipe_from_dict({**BASE, "measure": {"draft_len": 4, "profile": "p.json"}})
    with pytest.raises(RecipeError, match="measure.draft_len"):
        recipe_from_dict({**BASE, "measure": {"draft_len": 0}})
    dspark = {"drafter": {"type": "dspark"}, "measure": {"draft_len": 3}}
    with pytest.raises(UserError, match="runs at D = .* only"):
        measure_draft_len(ctx_for(dspark))


def test_the_engine_the_plan_prices_is_named_by_the_user():
    """Issue 54: engine.serving names vLLM or SGLang and a release (quoted text); unset, TensorRT-LLM at the bundle's
    release. A strict section: unknown keys, frameworks and numbers are refused naming the field."""
    assert recipe_from_dict(BASE).serving_engine == ("TensorRT-LLM", "1.3")
    r = recipe_from_dict({**BASE, "engine": {"serving": {"framework": "vllm", "version": "0.10.2"}}})
    assert r.serving_engine == ("vLLM", "0.10.2") and r.trtllm_profile == "1.3"
    assert recipe_from_dict({**BASE, "engine": {"serving": {"framework": "sglang", "version": "0.5.1.post3"}}}
                            ).serving_engine == ("SGLang", "0.5.1.post3")
    for serving, match in [({"framework": "tgi", "version": "1.0"}, "engine.serving.framework: Input should be "
                                                                     "'vllm' or 'sglang'"),
                           ({"framework": "vllm", "version": 0.10}, "is a number; write the release as quoted"),
                           ({"framework": "vllm", "version": "latest"}, "'latest' is not a release number"),
                           ({"framework": "vllm"}, "engine.serving.version"),
                           ({"framework": "vllm", "version": "0.10.2", "verison": "x"}, "engine.serving.verison")]:
        with pytest.raises(RecipeError, match=match):
            recipe_from_dict({**BASE, "engine": {"serving": serving}}, "r.yaml")

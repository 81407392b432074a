"""Where speculation stops paying, and the schedule following the new cost curve (issue 17, item 4)."""

from __future__ import annotations

from trtllm_spec.core.hardware import load_hardware
from trtllm_spec.core.targets import resolve_shape
from trtllm_spec.drafters.eagle3.config import Eagle3Drafter
from trtllm_spec.drafters.registry import MECHANISMS
from trtllm_spec.planner.acceptance import table
from trtllm_spec.planner.limits import PAYS_MARGIN, speculation_limit, speedup_at
from trtllm_spec.planner.plan import PlanRequest, make_plan, mechanism_plan
from trtllm_spec.planner.schedule import draft_len_at
from trtllm_spec.planner.search import CostContext, Workload

LLAMA8, H100 = resolve_shape("llama-3.1-8b-instruct"), load_hardware("h100")
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def request(al: dict[int, float], profile: str = "1.3") -> PlanRequest:
    # 1.3: the first profile whose engine applies a draft_len_schedule to one-model EAGLE-3 (PR #10860)
    return PlanRequest(mechanisms=MECHANISMS, target=LLAMA8, hardware=H100, drafter=Eagle3Drafter(draft_vocab_size=32000),
                       workload=Workload(BATCHES, 512, 512), acceptance=table(al, "test", measured=True),
                       max_draft_len=max(al), compare=False, trtllm_profile=profile)


def test_weak_drafter_stops_paying_at_a_batch_and_says_so():
    req = request({1: 1.35, 2: 1.45, 3: 1.5})
    ctx = CostContext(req.target, req.hardware, req.par, req.precision, req.workload)
    mp = mechanism_plan(req, "eagle3", req.drafter, req.acceptance)
    lim = speculation_limit(ctx, mp)
    up, stop = lim["pays_up_to"], lim["stops_paying_at"]
    assert up is not None and stop is not None and stop > up
    assert max(speedup_at(ctx, mp, up, d) for d in (1, 2, 3)) > 1 + PAYS_MARGIN
    assert max(speedup_at(ctx, mp, stop, d) for d in (1, 2, 3)) <= 1 + PAYS_MARGIN
    rec = make_plan(req)["recommendation"]
    assert rec["speculation_pays_up_to"] == up and f"stops paying at {stop}" in rec["speculation_limit"]["note"]


def test_schedule_follows_the_curve_and_never_lengthens_with_batch():
    plan = make_plan(request({1: 1.78, 2: 2.36, 3: 2.79, 4: 3.08, 5: 3.32, 6: 3.46, 7: 3.54}))
    rec = plan["recommendation"]
    ds = [r["draft_len"] for r in rec["by_batch"]]
    assert ds == sorted(ds, reverse=True) and ds[0] > ds[-1]  # shorter D at larger batches
    sched = {int(k): v for k, v in rec["draft_len_schedule"].items()}
    for r in rec["by_batch"]:  # the rendered thresholds give back the D chosen at every planned batch
        assert draft_len_at(sched, rec["max_draft_len"], rec["trtllm_profile"], r["batch_size"]) == r["draft_len"]


def test_12_eagle3_plan_is_the_single_d_curve_the_engine_runs():
    """Issue 22 item 4: TensorRT-LLM 1.2 applies no schedule to one-model EAGLE-3, so the 1.2 plan keeps the best D
    of the smallest batch at every batch size, reports that curve, says where it stops paying and the alternatives."""
    al = {1: 1.78, 2: 2.36, 3: 2.79, 4: 3.08, 5: 3.32, 6: 3.46, 7: 3.54}
    rec13 = make_plan(request(al, "1.3"))["recommendation"]
    plan = make_plan(request(al, "1.2"))
    rec = plan["recommendation"]
    assert rec["draft_len_schedule"] is None and rec["max_concurrency"] is None
    assert rec["max_draft_len"] == rec13["max_draft_len"]
    assert {r["draft_len"] for r in rec["by_batch"]} == {rec["max_draft_len"]}
    rule = rec["draft_len_rule"]
    assert "TensorRT-LLM 1.2 applies no draft_len_schedule or max_concurrency to EAGLE-3" in rule
    assert "TensorRT-LLM 1.3 does" in rule
    assert len({r["draft_len"] for r in rec13["by_batch"]}) > 1  # 1.3 does vary D with the batch size
    by12 = {r["batch_size"]: r["speedup"] for r in rec["by_batch"]}
    d = rec["max_draft_len"]
    for c in plan["candidates"]:  # the reported curve is the candidates' at that one D
        if c["mechanism"] == "eagle3" and c["draft_len"] == d and c["batch_size"] in by12:
            assert abs(c["speedup"] - by12[c["batch_size"]]) < 1e-3
    if any(v < 1 for v in by12.values()):
        assert "separate deployment without speculative_config" in rule


def test_14_never_relies_on_a_tier_switching_speculation_off():
    """1.4 (main floors one-engine modes at D = 1): where the 1.3 plan would draft 0 tokens, the 1.4 plan drafts 1
    and the schedule reaches the engine's max batch size (no implicit tier above its largest key)."""
    al = {1: 1.35, 2: 1.45, 3: 1.5}
    rec13 = make_plan(request(al, "1.3"))["recommendation"]
    rec = make_plan(request(al, "1.4"))["recommendation"]
    if rec13["max_draft_len"] == 0:
        return
    assert 0 in {r["draft_len"] for r in rec13["by_batch"]}  # the weak drafter stops paying within the batches
    assert min(r["draft_len"] for r in rec["by_batch"]) == 1
    assert "may not switch EAGLE-3 speculation off" in rec["draft_len_rule"]
    sched = rec["draft_len_schedule"]
    assert sched is None or max(int(k) for k in sched) >= max(BATCHES)


def test_limit_note_names_only_a_gate_the_engine_applies():
    al = {1: 1.35, 2: 1.45, 3: 1.5}  # a weak drafter: stops paying within the searched batches
    note13 = make_plan(request(al, "1.3"))["recommendation"]["speculation_limit"]["note"]
    note12 = make_plan(request(al, "1.2"))["recommendation"]["speculation_limit"]["note"]
    assert "stops paying" in note13 and "max_concurrency, or the draft_len_schedule" in note13
    assert "no schedule or max_concurrency applies" in note12 and "deployment without speculative_config" in note12


def test_14_implicit_tier_is_settled_per_main_state_and_never_reached():
    """Issue 37: what a batch above the largest key runs is ``get_draft_len_for_batch_size(..., min_runtime_draft_len)``
    (``tensorrt_llm/_torch/speculative/utils.py``), and main changed it: every one-engine mode floored at 1 (upstream
    test_min_runtime_draft_len.py @011d0933: {4: 4, 8: 2, 32: 1} gives 1 at batch 33), then linear EAGLE-3 /
    MTP-Eagle one-model went back to 0 with the drafter kept warm while draft-target, PARD, DFlash and SA keep 1
    (a later version of that test;
    newest main's draft_len_schedule description: "Batch sizes 33+: use draft_len=0 (implicit, speculation
    disabled)"). The 1.4 pages cannot say which a 1.4 release runs, so the plan names both and never reaches that
    tier: the schedule's largest key is max_batch_size."""
    from trtllm_spec.core.trtllm_gates import MAIN_STATES, engine_schedule

    tier = {name: dict(zip(MAIN_STATES, m.implicit_tier, strict=True)) for name, m in MECHANISMS.items()
            if m.implicit_tier}
    floor, warm = ({n: t[s] for n, t in tier.items()} for s in MAIN_STATES)
    assert floor["eagle3"] == 1 and warm["eagle3"] == 0 and warm["mtp"] == 0
    assert floor["dflash"] == warm["dflash"] == 1 and warm["draft_model"] == 1 and warm["suffix"] == 1
    # every mechanism the engine schedules names its implicit tier in each main state read
    assert all(len(m.implicit_tier) == len(MAIN_STATES) for m in MECHANISMS.values() if m.dynamic_draft_len_since)
    _, switches_off, why = engine_schedule(MECHANISMS["eagle3"], "1.4")
    assert switches_off is False and "D = 0 (newest main, keep-warm" in why and "D = 1 (main, floor" in why
    assert "not settled" in why and "never reached" in why
    _, _, why = engine_schedule(MECHANISMS["dflash"], "1.4")
    assert "D = 1 in every main state read" in why and "not settled" not in why
    rec = make_plan(request({1: 1.78, 2: 2.36, 3: 2.79, 4: 3.08, 5: 3.32, 6: 3.46, 7: 3.54}, "1.4"))["recommendation"]
    sched = rec["draft_len_schedule"]
    assert sched is None or max(int(k) for k in sched) >= max(BATCHES)  # the implicit tier is beyond every batch

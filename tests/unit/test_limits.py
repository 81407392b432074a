"""Where speculation stops paying, and the schedule following the new cost curve (issue 17, item 4)."""

from __future__ import annotations

from trtllm_spec.core.hardware import load_hardware
from trtllm_spec.core.recipe import Eagle3Drafter
from trtllm_spec.core.targets import resolve_shape
from trtllm_spec.drafters.registry import MECHANISMS
from trtllm_spec.planner.acceptance import table
from trtllm_spec.planner.limits import PAYS_MARGIN, speculation_limit, speedup_at
from trtllm_spec.planner.plan import PlanRequest, make_plan, mechanism_plan
from trtllm_spec.planner.schedule import draft_len_at
from trtllm_spec.planner.search import CostContext, Workload

LLAMA8, H100 = resolve_shape("llama-3.1-8b-instruct"), load_hardware("h100")
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def request(al: dict[int, float]) -> PlanRequest:
    return PlanRequest(mechanisms=MECHANISMS, target=LLAMA8, hardware=H100, drafter=Eagle3Drafter(draft_vocab_size=32000),
                       workload=Workload(BATCHES, 512, 512), acceptance=table(al, "test", measured=True),
                       max_draft_len=max(al), compare=False)


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

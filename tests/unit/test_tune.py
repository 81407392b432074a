"""trtllm-spec tune: the fit on synthetic cells whose terms are KNOWN (tests/tune_fakes.py), the design refusals, the
noise rules, the schedule, and the command against FAKE speculative servers (every flag, resume, bad input)."""

from __future__ import annotations

import json

import pytest

from tests.tune_fakes import KNOWN, KNOWN_TTFT, FakeSpecServer, synthetic_runs
from trtllm_spec.errors import UserError
from trtllm_spec.planner import tune as tm
from trtllm_spec.stages.tune import (
    TuneSettings,
    check_design,
    choose_calibration,
    parse_cells,
    parse_draft_lens,
    schedule_at_zero,
    tune_context,
)

CS, DS = (1, 2, 4, 8, 16), (0, 1, 2, 3, 4, 5)
SCALE = 0.04  # the FAKE servers' step: ~3 ms a token, long enough that client overhead does not change the batch


@pytest.fixture(scope="module")
def context():
    import trtllm_spec.drafters  # noqa: F401
    from tests.conftest import LLAMA_TINY

    s = TuneSettings(engine="openai", target="x", drafter=None, drafter_type="eagle3", servers={}, concurrency=CS,
                     draft_lens=DS, calibration=choose_calibration(CS, DS))
    return s, *tune_context(s, dict(LLAMA_TINY))


def _fit(context, runs, cal):
    s, mp, ctx = context
    cells = tm.group(runs)
    top = max(d for _c, d in cal)
    acc = tm.acceptance_from([cells[x] for x in cal if x[1] == top], "test")
    return cells, tm.fit(cells, runs, cal, ctx, mp.cost, acc)


# ---- the fit --------------------------------------------------------------------------------------------------

def test_six_cells_recover_every_known_term_and_predict_every_other_cell(context):
    s, mp, ctx = context
    assert s.calibration == ((1, 0), (1, 1), (1, 5), (8, 0), (8, 1), (8, 5))
    runs = synthetic_runs()
    cells, f = _fit(context, runs, s.calibration)
    for k, v in KNOWN.items():
        assert f.host.terms[k] == pytest.approx(v, rel=1e-3), k
    for k, v in KNOWN_TTFT.items():
        assert f.ttft.terms[k] == pytest.approx(v, rel=1e-3), k
    pred = tm.predict(f, ctx, mp, CS, 48)
    held = [k for k in cells if k[1] and k not in s.calibration]
    assert len(held) == 21  # 25 speculative cells, 4 of them calibrated
    errs = tm.errors(pred, cells, held)
    assert max(abs(e) for e in errs["server"] + errs["tpot"]) < 1e-3  # AL(D) from the D = 5 counters' prefixes
    best = {c: max(DS, key=lambda d: cells[(c, d)].speedup) for c in CS}
    assert tm.picks(pred, 0.0) == best


def test_four_cells_fit_form_f_when_the_speculative_cost_is_per_draft_token(context):
    """{1, 8} x {0, 3}: one D cannot split the speculative constant from the per-token term; tune assigns the sum
    per draft token (form F), which is exact when that is how the engine costs it."""
    import tests.tune_fakes as tf

    truth = dict(KNOWN, spec_iteration_s=0.0, spec_sequence_s=0.0)
    old = tf.KNOWN.copy()
    tf.KNOWN.update(truth)
    try:
        runs = synthetic_runs()
    finally:
        tf.KNOWN.update(old)
    cal = ((1, 0), (1, 3), (8, 0), (8, 3))
    _cells, f = _fit(context, runs, cal)
    assert f.host.terms["draft_step_s"] == pytest.approx(truth["draft_step_s"], rel=1e-3)
    assert f.host.terms["draft_sequence_s"] == pytest.approx(truth["draft_sequence_s"], rel=1e-3)
    assert f.host.terms["spec_iteration_s"] == pytest.approx(0.0, abs=1e-9)
    assert "spec_iteration_s + n draft_step_s" in f.host.identified and tm.form_of(cal).startswith("F")


def test_intervals_widen_with_the_noise_of_the_rounds(context):
    s, mp, ctx = context
    noisy = {(r, c, d): f for r, f in ((0, 0.9), (1, 1.1)) for c in CS for d in (1, 5)}
    for runs, wide in ((synthetic_runs(), False), (synthetic_runs(noise=noisy), True)):
        cells, f = _fit(context, runs, s.calibration)
        band = tm.intervals(cells, runs, s.calibration, ctx, mp.cost, mp, f.acceptance, CS, 48, n=40)
        lo, hi = band[(16, 3)]["speedup"]
        assert (hi - lo > 0.02) == wide


# ---- noise, margin, schedule ------------------------------------------------------------------------------------

def test_a_disturbed_plain_round_is_found_and_the_others_are_not():
    runs = synthetic_runs(concurrency=(1, 2), draft_lens=(0, 2), noise={(1, 1, 0): 0.6})
    out = tm.outlier_rounds(runs)
    assert [(o["round"], o["concurrency"]) for o in out] == [(1, 1)]
    assert out[0]["deviation"] > out[0]["threshold"] >= 0.10
    assert tm.outlier_rounds(synthetic_runs(concurrency=(1, 2), draft_lens=(0, 2))) == []


def test_the_margin_comes_from_the_spread_and_stays_within_1_and_5_percent():
    quiet = tm.group(synthetic_runs(concurrency=(1, 2), draft_lens=(0, 2)))
    assert tm.noise_margin(quiet.values()) == tm.MIN_MARGIN
    noisy = tm.group(synthetic_runs(concurrency=(1, 2), draft_lens=(0, 2),
                                    noise={(0, c, 2): 0.97 for c in (1, 2)} | {(1, c, 2): 1.03 for c in (1, 2)}))
    assert tm.noise_margin(noisy.values()) == pytest.approx(0.03, abs=0.002)
    wild = tm.group(synthetic_runs(concurrency=(1, 2), draft_lens=(0, 2),
                                   noise={(0, c, 2): 0.5 for c in (1, 2)}))
    assert tm.noise_margin(wild.values()) == tm.MAX_MARGIN


def test_picks_take_the_smallest_d_within_the_margin_and_vllm_ranges_cover_every_batch():
    pred = {(1, 0): {"speedup": 1.0}, (1, 2): {"speedup": 1.50}, (1, 4): {"speedup": 1.52},
            (8, 0): {"speedup": 1.0}, (8, 2): {"speedup": 0.9}, (8, 4): {"speedup": 0.8}}
    assert tm.picks(pred, 0.02) == {1: 2, 8: 0}
    assert tm.picks(pred, 0.0) == {1: 4, 8: 0}
    assert tm.vllm_ranges({1: 5, 2: 5, 4: 3, 8: 0, 16: 0}, 16) == [(1, 2, 5), (3, 4, 3), (5, 16, 0)]
    assert tm.vllm_ranges({1: 2, 4: 2}, 8) == [(1, 8, 2)]


def test_the_schedule_where_it_asks_for_d_0_is_judged_against_the_plain_server():
    from trtllm_spec.report.tune import schedule_markdown

    picks = {1: 2, 4: 0, 16: 0}
    rows = [{"concurrency": 1, "speedup": 1.2, "spread": [1.1, 1.3], "over_best_fixed": 1.0},
            {"concurrency": 4, "speedup": 0.98, "spread": [0.96, 1.0], "over_best_fixed": 0.98},
            {"concurrency": 16, "speedup": 0.75, "spread": [0.73, 0.79], "over_best_fixed": 0.75}]
    z = schedule_at_zero(rows, picks, 0.05)
    assert z == {"concurrencies": [4, 16], "speedups": [0.98, 0.75], "slower_than_plain": [16]}
    assert [r["scheduled_draft_len"] for r in rows] == [2, 0, 0]
    assert schedule_at_zero(rows[:1], picks, 0.05) is None  # D > 0 everywhere: nothing to judge
    assert schedule_at_zero(rows[:2], picks, 0.05)["slower_than_plain"] == []  # within the margin: the plain server's
    sch = {"vllm_ranges": [[1, 1, 2], [2, 16, 0]], "vllm_num_speculative_tokens": 2, "trtllm_rules": "1.3",
           "trtllm_max_draft_len": 2, "trtllm_max_concurrency": 1, "trtllm_rule": "x", "measured": rows, "at_zero": z}
    text = "\n".join(schedule_markdown(sch))
    assert "D = 0 (concurrency 4, 16) the speculative server measured 0.75-0.98x the plain one" in text
    assert "beyond the margin at 16:" in text
    sch["at_zero"] = schedule_at_zero(rows[:2], picks, 0.05)
    assert "is not the plain server" not in "\n".join(schedule_markdown(sch))


def test_chunks_before_the_fit_fill_the_servers_memory_allows():
    from dataclasses import replace

    from trtllm_spec.stages.tune import prefit_chunks

    s = TuneSettings(engine="vllm", target="x", drafter="ngram", drafter_type="ngram", servers={}, concurrency=CS,
                     draft_lens=DS, calibration=choose_calibration(CS, DS), verify="all", max_servers=5)
    parts = prefit_chunks(s)
    assert [sorted(p) for p in parts] == [[1, 2, 3, 5]] and parts[0][2] == list(CS)  # D 1, 5 then 2, 3
    assert [sorted(p) for p in prefit_chunks(replace(s, verify="picks"))] == [[1, 5]]
    assert parts[0][1] == list(CS) and prefit_chunks(replace(s, verify="picks"))[0][1] == [1, 8]
    assert [sorted(p) for p in prefit_chunks(replace(s, max_servers=2))] == [[1], [5]]
    assert [sorted(p) for p in prefit_chunks(replace(s, engine="openai"))] == [[1, 2, 3, 4, 5]]


def test_design_refusals():
    assert parse_draft_lens("0-3") == (0, 1, 2, 3) and parse_draft_lens("3,0,1") == (0, 1, 3)
    for bad in ("1-3", "0", "a-b", "0;1"):
        with pytest.raises(UserError, match="--draft-lens"):
            parse_draft_lens(bad)
    assert parse_cells("8:3, 1:0,1:3,8:0") == ((1, 0), (1, 3), (8, 0), (8, 3))
    with pytest.raises(UserError, match="CONCURRENCY:D"):
        parse_cells("1-0")
    with pytest.raises(UserError, match="one concurrency"):
        check_design((4,), DS, ((4, 0), (4, 1)))
    with pytest.raises(UserError, match="two concurrencies or more"):
        check_design(CS, DS, ((1, 0), (1, 3), (8, 3)))  # the target alone at one concurrency only
    with pytest.raises(UserError, match="not in the grid"):
        check_design(CS, DS, ((1, 0), (32, 0)))
    assert choose_calibration((1, 4), (0, 2)) == ((1, 0), (1, 2), (4, 0), (4, 2))


# ---- the command against FAKE servers ----------------------------------------------------------------------------

@pytest.fixture
def fakes():
    servers = {d: FakeSpecServer(d, scale=SCALE) for d in (0, 1, 2)}
    yield servers
    for s in servers.values():
        s.stop()


def tune_args(target, servers, out, *extra):
    args = ["tune", "--engine", "openai", "--target", target, "--drafter-type", "eagle3", "--concurrency", "1,2,4",
            "--draft-lens", "0-2", "--max-tokens", "8", "--categories", "coding", "--out", out, *extra]
    for d, s in servers.items():
        args += ["--server", f"{d}={s.url}"]
    return args


def test_tune_measures_fits_picks_and_writes_the_record(cli, tiny_target, tiny_suite, fakes, tmp_path):
    out = tmp_path / "tune"
    r = cli(*tune_args(tiny_target, fakes, out, "--rounds", "3", "--verify", "all", "--json"))
    assert r.exit_code == 0, r.output
    for f in ("tune.json", "tune.md", "tune.png", "host_costs.json", "runs.json", "provenance.json"):
        assert (out / f).is_file(), f
    rec = json.loads((out / "tune.json").read_text())
    assert json.loads(r.stdout)["picks"] == rec["picks"]
    assert rec["calibration_cells"] == [[1, 0], [1, 1], [1, 2], [2, 0], [2, 1], [2, 2]]
    assert len(rec["cells"]) == 9 and all(c["measured"] for c in rec["cells"])  # --verify all
    runs = json.loads((out / "runs.json").read_text())["runs"]
    assert {r["chunk"] for r in runs if r["key"] != "schedule"} == {"cal0"}  # your servers are all up: one chunk
    assert rec["held_out"]["cells"] == 2 and rec["noise_floor"]["server"] is not None
    assert set(rec["judged"]) == {"1", "2", "4"} and 0.01 <= rec["margin"] <= 0.05
    host = json.loads((out / "host_costs.json").read_text())
    assert host["measured_step"] is True and host["release"] == "served" and host["prefill"]
    assert "budget" in r.output and "tok/s" in r.output  # the budget first, progress while it runs
    assert not any(tmp_path.glob(".tune.tune-work"))  # the work folder goes once the record is written
    md = (out / "tune.md").read_text()
    assert "## Prediction against measurement" in md and "Noise floor" in md


def test_a_server_that_dies_mid_sweep_keeps_the_runs_and_the_rerun_resumes(cli, tiny_target, tiny_suite, tmp_path):
    servers = {0: FakeSpecServer(0, scale=SCALE), 1: FakeSpecServer(1, scale=SCALE, die_after=6),
               2: FakeSpecServer(2, scale=SCALE)}
    out = tmp_path / "tune"
    try:
        r = cli(*tune_args(tiny_target, servers, out, "--rounds", "1", "--verify", "none"))
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        work = tmp_path / ".tune.tune-work" / "runs.json"
        assert f"kept in {work}" in r.output and "rerun the same command to resume" in r.output
        kept = len(json.loads(work.read_text())["runs"])
        assert kept >= 1 and not out.exists()
        port = servers[1].url.rsplit(":", 1)[1]
        servers[1].stop()
        servers[1] = FakeSpecServer(1, scale=SCALE, port=int(port))  # the server is back on its address
        r = cli(*tune_args(tiny_target, servers, out, "--rounds", "1", "--verify", "none"))
        assert r.exit_code == 0, r.output
        runs = json.loads((out / "runs.json").read_text())["runs"]
        assert len(runs) > kept and (out / "tune.json").is_file()
    finally:
        for s in servers.values():
            s.stop()


def test_other_settings_do_not_resume(cli, tiny_target, tiny_suite, tmp_path, fakes):
    work = tmp_path / ".tune.tune-work"
    work.mkdir()
    (work / "runs.json").write_text(json.dumps({"settings": {"rounds": 2}, "settings_key": "other", "runs": []}))
    r = cli(*tune_args(tiny_target, fakes, tmp_path / "tune", "--rounds", "3"))
    assert r.exit_code == 2 and "other settings" in r.output and "--force" in r.output


def test_a_cell_that_never_reaches_its_concurrency_is_refused(cli, tiny_target, tiny_suite, tmp_path):
    servers = {0: FakeSpecServer(0, scale=SCALE, slow=(2, 40.0)),  # chat 1 is the warm-up
                1: FakeSpecServer(1, scale=SCALE),
               2: FakeSpecServer(2, scale=SCALE)}
    try:
        r = cli(*tune_args(tiny_target, servers, tmp_path / "tune", "--rounds", "1", "--concurrency", "2,4"))
    finally:
        for s in servers.values():
            s.stop()
    assert r.exit_code == 2 and "requests in flight" in r.output and "Traceback" not in r.output


def test_dry_run_prints_the_design_and_budget_and_measures_nothing(cli, tiny_target, tiny_suite, fakes, tmp_path):
    r = cli(*tune_args(tiny_target, fakes, tmp_path / "tune", "--dry-run", "--calibration-cells", "1:0,1:2,4:0,4:2"))
    assert r.exit_code == 0, r.output
    assert "tune budget: calibration" in r.output and "(c 1, D 2)" in r.output
    assert not (tmp_path / "tune").exists() and all(s.chats == 0 for s in fakes.values())


def test_time_budget_that_cannot_fit_is_refused_before_measuring(cli, tiny_target, tiny_suite, fakes, tmp_path):
    r = cli(*tune_args(tiny_target, fakes, tmp_path / "tune", "--time-budget", "0.0001"))
    assert r.exit_code == 2 and "--time-budget" in r.output and "about" in r.output
    assert sum(s.chats for s in fakes.values()) <= 1  # only the warm-up that measured the rate


@pytest.mark.parametrize("extra,match", [
    (("--concurrency", "4"), "one concurrency cannot separate"),
    (("--calibration-cells", "1:0,1:2"), "two concurrencies or more"),
    (("--draft-lens", "1-2"), "D = 0"),
    (("--margin", "0.2"), "--margin 0.2"),
    (("--margin", "tight"), "--margin 'tight'"),
    (("--max-servers", "3"), "--max-servers: only --engine vllm"),
    (("--kv-cache-gib", "2"), "--kv-cache-gib: only --engine vllm"),
    (("--max-model-len", "4096"), "--max-model-len: only --engine vllm"),
    (("--no-serve-schedule",), "only --engine vllm"),
    (("--bundle", "b"), "--bundle: only --engine trtllm"),
    (("--time-budget", "-1"), "--time-budget -1"),
])
def test_bad_settings_are_one_line_and_exit_2(cli, tiny_target, tiny_suite, fakes, tmp_path, extra, match):
    r = cli(*tune_args(tiny_target, fakes, tmp_path / "tune", *extra))
    assert r.exit_code == 2 and match in r.output, r.output
    assert [ln for ln in r.output.splitlines() if ln.startswith("error:")] and "Traceback" not in r.output
    assert not (tmp_path / "tune").exists() and all(s.chats == 0 for s in fakes.values())


def test_server_flags_are_checked(cli, tiny_target, tiny_suite, fakes, tmp_path):
    base = ["tune", "--engine", "openai", "--target", str(tiny_target), "--drafter-type", "eagle3",
            "--draft-lens", "0-2", "--out", str(tmp_path / "t")]
    r = cli(*base, "--server", "0=http://127.0.0.1:1", "--server", "1=http://127.0.0.1:2")
    assert r.exit_code == 2 and "no --server for D = 2" in r.output
    r = cli(*base, "--server", "zero=http://x")
    assert r.exit_code == 2 and "give D=URL" in r.output
    r = cli(*base, *(f"--server={d}={s.url}" for d, s in fakes.items()), "--server", "7=http://127.0.0.1:3")
    assert r.exit_code == 2 and "D = 7 is not in --draft-lens" in r.output
    r = cli("tune", "--engine", "openai", "--target", str(tiny_target), "--out", str(tmp_path / "t"),
            *(f"--server={d}={s.url}" for d, s in fakes.items()), "--draft-lens", "0-2")
    assert r.exit_code == 2 and "--drafter-type" in r.output
    r = cli("tune", "--engine", "vllm", "--target", str(tiny_target), "--out", str(tmp_path / "t"),
            "--server", "0=http://x")
    assert r.exit_code == 2 and "--server: only --engine openai" in r.output
    r = cli("tune", "--engine", "vllm", "--target", str(tiny_target), "--out", str(tmp_path / "t"))
    assert r.exit_code == 2 and "needs --drafter" in r.output


def test_trtllm_engine_is_deferred_with_the_bundle_commands(cli, tmp_path):
    r = cli("tune", "--engine", "trtllm")
    assert r.exit_code == 2 and "needs --bundle" in r.output
    import yaml

    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"name": "t", "target": {"model": "llama-3.1-8b-instruct"},
                                      "drafter": {"type": "eagle3"}, "hardware": {"gpu": "h100"},
                                      "workload": {"batch_sizes": [1, 8], "isl": 512, "osl": 128}}))
    assert cli("build", recipe, "--out", tmp_path / "b").exit_code == 0
    r = cli("tune", "--engine", "trtllm", "--bundle", tmp_path / "b")
    assert r.exit_code == 0 and r.output.startswith("deferred:") and "bench_calibrate.sh" in r.output
    assert "replan.sh" in r.output


def test_the_schedule_server_is_measured_when_given(cli, tiny_target, tiny_suite, tmp_path):
    """A drafter whose every draft is accepted pays at low concurrency: the picks speculate, the schedule server
    (--server schedule=URL, here one that drafts 2) is measured at every concurrency."""
    servers = {d: FakeSpecServer(d, scale=SCALE, accept=(2,)) for d in (0, 1, 2)}
    servers["schedule"] = FakeSpecServer(2, scale=SCALE, accept=(2,))
    try:
        r = cli(*tune_args(tiny_target, servers, tmp_path / "tune", "--rounds", "1", "--verify", "picks",
                           "--margin", "0.01"))
    finally:
        for s in servers.values():
            s.stop()
    assert r.exit_code == 0, r.output
    rec = json.loads((tmp_path / "tune" / "tune.json").read_text())
    assert rec["schedule"]["vllm_ranges"] and len(rec["schedule"]["measured"]) == 3
    assert (tmp_path / "tune" / "vllm_speculative_config.json").is_file()


def test_a_suite_file_and_a_request_timeout(cli, tiny_target, tmp_path):
    """--suite FILE: the user's prompts (JSONL of messages) are what every cell sends; --request-timeout: a server
    slower than it is one line, exit 2, the runs kept."""
    suite = tmp_path / "prompts.jsonl"
    suite.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"w{i} w{i + 1} w{i + 2}"}],
                                         "category": "mine"}) + "\n" for i in range(3)))
    servers = {d: FakeSpecServer(d, scale=SCALE) for d in (0, 1, 2)}
    try:
        base = ["tune", "--engine", "openai", "--target", str(tiny_target), "--drafter-type", "eagle3",
                "--concurrency", "1,2", "--draft-lens", "0-2", "--max-tokens", "8", "--suite", str(suite), "--num-prompts", "10",
                "--rounds", "1", "--verify", "none", *(f"--server={d}={s.url}" for d, s in servers.items())]
        r = cli(*base, "--out", str(tmp_path / "a"))
        assert r.exit_code == 0, r.output
        assert "3 prompts x 8 tokens" in r.output and servers[1].chats >= 3
        slow = {d: FakeSpecServer(d, scale=2.0) for d in (0, 1, 2)}  # ~0.5 s to the first token
        try:
            r = cli(*base[:-3], *(f"--server={d}={s.url}" for d, s in slow.items()), "--request-timeout", "1",
                    "--out", str(tmp_path / "b"))
        finally:
            for s in slow.values():
                s.stop()
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    finally:
        for s in servers.values():
            s.stop()


def test_a_full_disk_is_refused_before_anything_starts(cli, tiny_target, tiny_suite, fakes, tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 2**20, 2**20))
    r = cli(*tune_args(tiny_target, fakes, tmp_path / "tune"))
    assert r.exit_code == 2 and "MB free" in r.output and all(s.chats == 0 for s in fakes.values())

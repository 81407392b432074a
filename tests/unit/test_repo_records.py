"""What a clone holds is self-contained and indexed (issue 34): every file under ``benchmarks/`` is in
``benchmarks/README.md``; no committed file carries a path of the machine that recorded it; docs and docstrings cite
only files a clone has (upstream ones by repository, path and release); every ``benchmarks/...`` path the repo
names exists; README's "Measured on this CPU" table is what ``scripts/render_readme_table.py`` renders from the
benchmarks' JSON records."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SELF = Path(__file__).resolve()  # this file spells out the patterns it looks for
SKIP_DIRS = {".git", ".venv", "out", "build", "dist", "__pycache__", ".pytest_cache", ".ruff_cache"}
TEXT_SUFFIXES = {".py", ".md", ".json", ".yaml", ".yml", ".toml", ".sh", ".txt", ".cfg", ".ini", ".sbatch", ""}


def repo_files() -> list[Path]:
    """The committed (or to-be-committed) files: ``git ls-files`` in a checkout, else a walk of the tree."""
    try:
        out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split("\n")
        files = [ROOT / p for p in out if p]
    except (OSError, subprocess.CalledProcessError):
        files = [p for p in ROOT.rglob("*") if p.is_file()]
    return sorted(p for p in files if p.is_file() and not p.is_symlink() and p.resolve() != SELF
                  and not SKIP_DIRS & set(p.relative_to(ROOT).parts) and p.suffix in TEXT_SUFFIXES)


# -- the benchmarks index ---------------------------------------------------------------------------------------------

def benchmark_files() -> list[str]:
    bench = ROOT / "benchmarks"
    return sorted(str(p.relative_to(bench)) for p in bench.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.name != "README.md")


def test_every_benchmark_file_is_in_the_index():
    files = benchmark_files()
    assert len(files) > 20 and "decisions/plan_speed.py" in files  # the walk found them, the decisions folder too
    index = (ROOT / "benchmarks" / "README.md").read_text()
    missing = [f for f in files if f"`{f}`" not in index]
    assert not missing, "benchmarks/README.md does not list: " + ", ".join(missing)


def test_the_index_names_no_file_that_is_gone():
    index = (ROOT / "benchmarks" / "README.md").read_text()
    named = set(re.findall(r"`([\w./-]+\.(?:md|py|json|sh))`", index))
    assert "scripts/gpu/gpu_check.sh" in named and "decisions/omp_wait.py" in named
    gone = sorted(n for n in named if not (ROOT / "benchmarks" / n).exists() and not (ROOT / n).exists())
    assert not gone, "benchmarks/README.md names files that do not exist: " + ", ".join(gone)


# -- machine paths --------------------------------------------------------------------------------------------------

# A machine path is one that exists only where a record was made: this workplace's tree (/work/...), a home folder
# (/root/..., /home/<user>/...), a scratch folder under /tmp named in a recorded command or result, or a stage-cache
# key of one run. Not machine paths: /tmp in code (Dockerfile build mounts, a test's hostile input), lock files a
# command creates anywhere (flock /tmp/heavy.lock), container mount points, the documented default cache
# (~/.cache/trtllm-spec), and the made-up paths tests feed as bad input.
MACHINE = [
    (re.compile(r"(?<![\w.$-])/work/[\w.-]"), "a path of this workplace's tree"),
    (re.compile(r"(?<![\w.$-])/(?:root|home/[\w.-]+)/"), "a home folder"),
    (re.compile(r"stages/[\w-]+-[0-9a-f]{12,}"), "the stage-cache key of one run"),
]
RECORD_ONLY = [(re.compile(r"(?<![\w.$-])/tmp/(?![\w-]+\.lock\b)[\w.-]+"), "a scratch folder of one machine")]
RECORDS = ("benchmarks/", "docs/", "README.md", "tests/reliability/README.md", "scripts/gpu/gpu_check.md")
ALLOWED = {
    # the container's mount points, not the host's
    "scripts/docker_check.sh": ("/work/conversations.jsonl", "/work/out", "/work/train.yaml"),
    "docs/docker.md": (":/root/.cache/huggingface", "/tmp/pip.conf"),
    # bad input the tests feed on purpose
    "tests/unit/test_build_scripts.py": ("/home/me/",),
    "tests/unit/test_trtllm_options.py": ("/home/me/",),
    "tests/reliability/test_hostile_inputs.py": ("/tmp/pwned",),
}


def machine_paths(rel: str, text: str) -> list[str]:
    for allowed in ALLOWED.get(rel, ()):
        text = text.replace(allowed, "")
    rules = MACHINE + (RECORD_ONLY if rel.startswith(RECORDS) else [])
    out = []
    for no, line in enumerate(text.split("\n"), 1):
        out += [f"{rel}:{no}: {m.group(0)!r} ({why})" for rx, why in rules for m in rx.finditer(line)]
    return out


def test_no_committed_file_carries_a_machine_path():
    files = repo_files()
    assert any(p.name == "suffix.json" for p in files)
    bad = [hit for p in files for hit in machine_paths(str(p.relative_to(ROOT)), p.read_text(errors="replace"))]
    assert not bad, "machine paths in committed files:\n" + "\n".join(bad)


@pytest.mark.parametrize("rel, text, hits", [
    ("benchmarks/x.md", "git clone /work/main /tmp/mainjob", 2),
    ("benchmarks/x.json", '"command": "x --eagle /root/.cache/trtllm-spec/stages/drafter-575ab268e7c2d12728b6/d"', 2),
    ("trtllm_spec/x.py", "see /work/notes/x.md and /home/me/y", 2),
    ("benchmarks/x.md", "flock /tmp/heavy.lock .venv/bin/python benchmarks/suffix.py --out out/x", 0),
    ("trtllm_spec/x.py", 'tempfile.mkdtemp(dir="/tmp/x")', 0),  # /tmp in code is not a record
    ("docs/x.md", "cache `~/.cache/trtllm-spec/models/smollm2-135m/hf`; /dev/shm", 0),
])
def test_the_machine_path_rule(rel, text, hits):
    assert len(machine_paths(rel, text)) == hits


# -- citations ------------------------------------------------------------------------------------------------------

# Files of the sessions that wrote this code, which a clone does not have.
OUTSIDE = re.compile(r"\b(?:REFERENCE\.md|ARCHITECTURE\.md|SEED\.md)|(?<![\w.])notes/[\w-]+\.md|\.\./shared/")


def test_docs_and_docstrings_cite_only_what_a_clone_has():
    bad = [f"{p.relative_to(ROOT)}:{no}: {line.strip()[:120]}" for p in repo_files()
           for no, line in enumerate(p.read_text(errors="replace").split("\n"), 1)
           if OUTSIDE.search(line)]
    assert not bad, "citations of files a clone does not have:\n" + "\n".join(bad)


@pytest.mark.parametrize("line, hit", [
    ("(REFERENCE.md section 8)", True), ("the dependency rule (ARCHITECTURE.md: cli -> stages)", True),
    ("guidelines (`../shared/SEED.md`)", True), ("from /work/notes/research_trtllm_triton.md §2", True),
    ("(docs/architecture.md: cli -> stages)", False), ("NVIDIA/TensorRT-LLM 1.2.1, `tensorrt_llm/commands/serve.py`", False),
    ("see the release notes of vLLM 0.9.2", False),
])
def test_the_citation_rule(line, hit):
    assert bool(OUTSIDE.search(line)) is hit


def test_every_benchmarks_path_named_exists():
    rx = re.compile(r"(?<![\w/.-])((?:benchmarks|scripts/gpu|tests/reliability)/[\w./-]*\.(?:md|py|json|sh))")
    bad = []
    for p in repo_files():
        if p.suffix == ".json" and p.parent.name == "benchmarks":
            continue  # recorded commands name the files of their own run
        for no, line in enumerate(p.read_text(errors="replace").split("\n"), 1):
            bad += [f"{p.relative_to(ROOT)}:{no}: {m}" for m in rx.findall(line)
                    if "<" not in m and not (ROOT / m).exists()]
    assert not bad, "paths that do not exist:\n" + "\n".join(bad)


# -- README's measured table ----------------------------------------------------------------------------------------

def test_readme_table_is_what_the_benchmark_records_render():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "render_readme_table.py"), "--check"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


# -- the record helper and the renderer -----------------------------------------------------------------------------

def _load(path: Path, name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_record_carries_the_convention_and_no_machine_path(tmp_path, monkeypatch):
    rec = _load(ROOT / "benchmarks" / "_record.py", "_record")
    argv = [str(ROOT / "benchmarks" / "suffix.py"), "--eagle", "/root/.cache/x/stages/drafter-abc/drafter",
            f"--json={ROOT / 'benchmarks' / 'suffix.json'}", "--draft-len", "4"]
    out = rec.write_record("suffix", {"al": 1.5}, [{"what": "w", "result": "r", "where": "`benchmarks/suffix.md`"}],
                           argv=argv, out=tmp_path / "suffix.json")
    data = json.loads(out.read_text())
    assert set(data) >= {"benchmark", "date", "commit", "command", "machine", "result", "readme"}
    assert data["command"] == (".venv/bin/python benchmarks/suffix.py --eagle .../drafter-abc/drafter "
                               "--json=benchmarks/suffix.json --draft-len 4")
    assert {"cpu", "cores", "memory_gib", "flags", "python", "torch"} <= set(data["machine"])
    assert isinstance(data["machine"]["flags"], list)
    assert not machine_paths("benchmarks/suffix.json", out.read_text())
    assert not list(tmp_path.glob("*.tmp"))  # written through a temporary file, renamed
    with pytest.raises(ValueError, match="what, result, where"):
        rec.write_record("x", {}, [{"what": "w", "result": "r"}], argv=argv, out=tmp_path / "x.json")


def test_the_renderer_writes_and_checks_the_table(tmp_path):
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    base = {"date": "2026-12-01", "commit": "a871ce2abc", "command": "x", "result": {}}
    (bench / "build.json").write_text(json.dumps({**base, "benchmark": "build", "machine": {
        "cpu": "AMD EPYC 9R14 (VM)", "cores": 2, "flags": ["avx2", "avx512f", "avx512_bf16"]},
        "readme": [{"what": "main job", "result": "18 min | 14 s", "where": "`benchmarks/build.md`"}]}))
    (bench / "ecosystem-run.json").write_text(json.dumps({"rows": []}))  # raw data, no readme rows: not a row
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n<!-- measured:begin -->\nold\n<!-- measured:end -->\n\nafter\n")
    script = str(ROOT / "scripts" / "render_readme_table.py")
    args = ["--readme", str(readme), "--benchmarks", str(bench)]
    r = subprocess.run([sys.executable, script, "--check", *args], capture_output=True, text=True)
    assert r.returncode == 1 and "+| main job |" in r.stdout
    assert subprocess.run([sys.executable, script, *args]).returncode == 0
    text = readme.read_text()
    assert ("| main job | 18 min \\| 14 s | `benchmarks/build.md` (2026-12-01, a871ce2, 2-core AMD EPYC 9R14, "
            "AVX-512 BF16, no AMX) |") in text and text.endswith("<!-- measured:end -->\n\nafter\n")
    assert subprocess.run([sys.executable, script, "--check", *args]).returncode == 0
    rec = json.loads((bench / "build.json").read_text())
    (bench / "build.json").write_text(json.dumps({**rec, "stale": "rerun it"}))
    assert subprocess.run([sys.executable, script, *args]).returncode == 0
    assert "AVX-512 BF16, no AMX; not current: rerun it) |" in readme.read_text()
    (bench / "bad.json").write_text(json.dumps({"benchmark": "bad", "readme": []}))
    r = subprocess.run([sys.executable, script, "--check", *args], capture_output=True, text=True)
    assert r.returncode == 2 and "benchmarks/bad.json: a record with readme rows lacks date, commit" in r.stderr
    assert "Traceback" not in r.stderr


# -- each kept script computes README's rows from its result --------------------------------------------------------

def _script(name: str):
    bench = str(ROOT / "benchmarks")
    if bench not in sys.path:
        sys.path.insert(0, bench)  # the scripts import _record from their own folder, as when run
    return _load(ROOT / "benchmarks" / f"{name}.py", f"bench_{name}")


@pytest.mark.parametrize("name", ["suffix", "reference_decoder"])
def test_a_recorded_row_is_what_its_script_computes(name):
    rec = json.loads((ROOT / "benchmarks" / f"{name}.json").read_text())
    assert _script(name).readme_rows(rec["result"]) == rec["readme"]


def test_learning_curve_rows_from_the_recorded_raw_rows():
    rows = json.loads((ROOT / "benchmarks" / "learning_curve-long.json").read_text())
    out = _script("learning_curve").readme_rows({"recipe": "recipes/smollm2-135m-eagle3-cpu-long.yaml",
                                                  "overrides": "", "num_prompts": 1, "draft_len": 3, "rows": rows})
    assert out[0]["result"].startswith("AL(3) 1.31 after 8 min (0.46M training tokens) -> 1.55 after 120 min")
    assert "11-prompt slice" in out[0]["result"]


def test_ecosystem_rows_from_the_recorded_run():
    eco = _script("ecosystem")
    data = json.loads((ROOT / "benchmarks" / "ecosystem-run.json").read_text())
    stats = {"cells": 22, "picks_measured_fastest": 20, "median_abs_error": 0.031, "max_abs_error": 0.36}
    result = eco.record_result(data, stats, ROOT / "benchmarks" / "ecosystem-run.json", reread=True)
    assert result["overall_speedup"]["bf16"]["ours-ngram"] == 1.33 and result["overall_speedup"]["fp32"]["ours-ngram"] == 1.12
    rows = eco.readme_rows(result)
    assert rows[0]["what"].endswith("(decoding rows re-read from benchmarks/ecosystem-run.json, not re-run)")
    assert rows[1]["result"] == ("picks the fastest in 20/22 (dtype, category) cells; median error of the predicted "
                                 "decode speedup 3% (max 36%)")
    recorded = json.loads((ROOT / "benchmarks" / "ecosystem.json").read_text())["readme"]
    assert rows[1]["result"] == recorded[1]["result"]  # the transcribed planner row is what the script computes


def test_regen_engines_and_engine_parity_rows():
    regen = _script("regen_engines").readme_rows({"rows": [
        {"engine": "ours fp32, batch 16, no capture", "short": False, "tok_s": 122.9, "vs_ours": 1.0, "identical": 16, "of": 16},
        {"engine": "hf (transformers generate) fp32, batch 16", "short": False, "tok_s": 110.0, "vs_ours": 0.9, "identical": 16, "of": 16},
        {"engine": "llama.cpp llama-server (native, GGUF Q4_1), 1 concurrent", "short": False, "tok_s": 105.6,
         "vs_ours": 0.86, "identical": 8, "of": 16},
        {"engine": "llama.cpp llama-server (native, GGUF Q4_1), 8 concurrent", "short": False, "tok_s": 208.9,
         "vs_ours": 1.7, "identical": 8, "of": 16}]})
    assert regen[0]["result"] == ("ours fp32 122.9 tok/s; transformers 0.90x; native llama-server (Q4_1 GGUF, what "
                                  "`assets serve` starts) 0.86x (1 stream) / 1.70x (8) but 8/16 replies differ from "
                                  "the checkpoint's: `auto` keeps ours")

    def prompt(same, a, b):
        return {"same_output_both_engines": same, "acceptance_length_llamacpp": a, "acceptance_length_reference": b}

    overall = {"num_prompts": 2, "relative_difference": 0.003, "identical_to_llamacpp_target_greedy": 2}
    rows = _script("engine_parity").readme_rows([
        {"type": "eagle3", "comparison": {"overall": overall, "prompts": [prompt(True, 1.5, 1.5), prompt(False, 1.2, 1.3)]}},
        {"type": "mtp", "error": "llama.cpp runs a target's own nextn layers"}], 3)
    assert rows[0]["result"] == ("AL ratio llama.cpp / ours 1.003 (EAGLE-3); same AL to 4 decimals on 1 of 1 prompts "
                                 "with the same output on both engines; llama.cpp's output equals its own target-only "
                                 "greedy on 2/2; not run by llama.cpp: EAGLE-MTP")


def test_build_rows():
    build = _script("build")
    result = {"recipe": build.RECIPE, "fresh_clone": True, "wall_s": 1094.4, "peak_rss_gb": 2.62,
              "cached_rebuild_s": 7.2, "bundle": {
                  "stages": {"drafter": {"seconds": 547.2}, "measure": {"seconds": 399.0}},
                  "max_draft_len": 0, "speculation_recommended": False,
                  "measured": {"num_prompts": 33, "acceptance_length": {"1": 1.2, "2": 1.25, "3": 1.27},
                               "identical_outputs": 33}}}
    rows = build.readme_rows(result)
    assert rows[0] == {"what": "main job (README's first line, fresh clone, setup included)",
                       "result": "18 min 14 s, 2.62 GB peak RSS (547 s drafter, 399 s measure); cached rebuild 7.2 s",
                       "where": "`benchmarks/build.md`"}
    assert rows[1]["result"] == ("AL(3) 1.27 on 33 speed-lite prompts, lossless 33/33; the plan for the recipe's GPU: "
                                 "no speculation")

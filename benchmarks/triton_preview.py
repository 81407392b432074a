"""Start-up and request times of the Triton CPU preview (docs/triton_preview.md): a real Triton Inference Server
(nvidia-pytriton 0.7.0's tritonserver 2.51) serving a bundle's llmapi repository through the preview model.py,
next to the same bundle in the reference decoder called directly (no Triton, no worker process), in one run.

Run (under the shared machine's heavy-work lock, if it has one):

    .venv/bin/python benchmarks/triton_preview.py --bundle BUNDLE --json benchmarks/triton_preview.json --md benchmarks/triton_preview.md

Measured:
- start: spawning tritonserver until /v2/health/ready (the worker loads the bundle's target and drafter), and
  stopping it (model unload, processes and /dev/shm gone), ``--starts`` times;
- requests (greedy, ``--max-tokens`` each, every prompt ``--repeats`` times): gRPC streaming (time to the first
  response = first token, time to the final response, responses per request), gRPC non-streaming, HTTP
  ``generate``, and the reference decoder in this process on the same prompt; every text is compared with the
  direct one. Prints markdown; ``--json`` writes the record (benchmark JSON convention).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
if "OMP_WAIT_POLICY" not in os.environ:  # the OpenMP policy the CLI and the preview's worker use
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")

PROMPTS = ["The future of AI is", "Write a Python function that returns the n-th Fibonacci number.",
           "Explain in two sentences why the sky is blue."]


def machine() -> dict:
    import torch

    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    flags = set(next((ln.split(":", 1)[1].split() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                      if ln.startswith("flags")), []))
    mem = next((int(ln.split()[1]) // 1024 ** 2 for ln in Path("/proc/meminfo").read_text().splitlines()
                if ln.startswith("MemTotal")), None)
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gb": mem,
            "isa": sorted(flags & {"avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"}),
            "python": platform.python_version(), "torch": torch.__version__,
            "triton": "tritonserver 2.51.0 (nvidia-pytriton 0.7.0)"}


def grpc_request(url: str, prompt: str, max_tokens: int, stream: bool) -> dict:
    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype

    def inp(name, value):
        t = grpcclient.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
        t.set_data_from_numpy(value)
        return t

    got: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: got.put((time.perf_counter(), result, error)))
    try:
        t0 = time.perf_counter()
        client.async_stream_infer("tensorrt_llm", [
            inp("text_input", np.array([prompt.encode()], dtype=object)), inp("streaming", np.array([stream])),
            inp("sampling_param_max_tokens", np.array([max_tokens], dtype=np.int32))],
            enable_empty_final_response=True)
        first, n = None, 0
        while True:
            t, result, error = got.get(timeout=600)
            if error is not None:
                raise RuntimeError(error.message())
            first = first or t
            n += 1
            if result.get_response().parameters["triton_final_response"].bool_param:
                return {"first_s": first - t0, "total_s": t - t0, "responses": n,
                        "text": result.as_numpy("text_output")[0].decode()}
    finally:
        client.stop_stream()
        client.close()


def http_request(url: str, prompt: str, max_tokens: int) -> dict:
    body = json.dumps({"text_input": prompt, "sampling_param_max_tokens": max_tokens}).encode()
    t0 = time.perf_counter()
    with urllib.request.urlopen(urllib.request.Request(f"{url}/v2/models/tensorrt_llm/generate", data=body),
                                timeout=600) as r:
        text = json.loads(r.read())["text_output"]
    return {"total_s": time.perf_counter() - t0, "text": text}


def direct(engine, prompt: str, max_tokens: int) -> dict:
    events = []
    t0 = time.perf_counter()
    engine.run({"text": prompt, "max_tokens": max_tokens, "stream": True},
               lambda ev: events.append((time.perf_counter(), ev)))
    return {"first_s": events[0][0] - t0, "total_s": events[-1][0] - t0, "text": events[-1][1]["text"],
            "tokens": events[-1][1]["tokens"], "accepted": events[-1][1]["accepted"],
            "drafted": events[-1][1]["drafted"]}


def med(rows: list[dict], key: str) -> float:
    return round(statistics.median(r[key] for r in rows), 4)


def run(args) -> dict:
    from trtllm_spec.deploy.triton_worker import Engine
    from trtllm_spec.serve.triton import TritonServer, find_triton
    from trtllm_spec.stages.triton import triton_from_bundle

    install = find_triton()
    load_before = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="triton-preview-bench-"))
    repo = tmp / "triton"
    triton_from_bundle(args.bundle, repo, force=False, model_name="tensorrt_llm", preview="reference")
    t0 = time.perf_counter()
    engine = Engine(args.bundle.resolve())  # the same bundle in this process: torch's default threads, as the worker
    load_s = time.perf_counter() - t0
    direct(engine, PROMPTS[0], 8)  # warm-up, as for the server
    starts, stops = [], []
    rows: dict[str, list[dict]] = {"grpc_stream": [], "grpc": [], "http": [], "direct": []}
    for i in range(args.starts):
        srv = TritonServer(repo, install=install, log_file=tmp / f"triton-{i}.log")
        srv.start(timeout_s=600)
        starts.append(round(srv.started_s, 3))
        try:
            if i == 0:
                grpc_request(srv.grpc_url, PROMPTS[0], 8, True)  # warm-up: first-call costs stay out
                http_request(srv.url, PROMPTS[0], 8)
                for _ in range(args.repeats):  # interleaved, so a busy machine slows every path alike
                    for p in PROMPTS:
                        rows["direct"].append(direct(engine, p, args.max_tokens))
                        rows["grpc_stream"].append(grpc_request(srv.grpc_url, p, args.max_tokens, True))
                        rows["grpc"].append(grpc_request(srv.grpc_url, p, args.max_tokens, False))
                        rows["http"].append(http_request(srv.url, p, args.max_tokens))
        finally:
            t0 = time.perf_counter()
            srv.stop()
            stops.append(round(time.perf_counter() - t0, 3))
            assert not srv.leftovers()
    ref = [r["text"] for r in rows["direct"]]
    identical = {k: sum(a["text"] == b for a, b in zip(rows[k], ref, strict=True)) for k in ("grpc_stream", "grpc", "http")}
    subprocess.run(["rm", "-rf", str(tmp)], check=False)
    result = {
        "bundle_drafter": engine.info["kind"], "draft_len": engine.info["draft_len"], "max_tokens": args.max_tokens,
        "requests_per_path": len(rows["direct"]), "start_to_ready_s": starts, "stop_s": stops,
        "direct_load_s": round(load_s, 3),
        "median": {k: {m: med(v, m) for m in ("first_s", "total_s") if m in v[0]} for k, v in rows.items()},
        "responses_per_streamed_request": med(rows["grpc_stream"], "responses"),
        "tokens_per_request": med(rows["direct"], "tokens"),
        "identical_to_direct": identical,
        "loadavg_1min": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],  # before, after: a busy machine?
    }
    d = result["median"]["direct"]["total_s"]
    result["overhead_vs_direct"] = {k: round(result["median"][k]["total_s"] / d, 3) for k in ("grpc_stream", "grpc", "http")}
    return result


def markdown(rec: dict) -> str:
    r = rec["result"]
    m = rec["machine"]
    lines = [f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gb']} GB, ISA {', '.join(m['isa'])}; "
             f"Python {m['python']}, torch {m['torch']}, {m['triton']}.  ",
             f"Command: `{rec['command']}` (commit {rec['commit']}, {rec['date']}).  ",
             f"Bundle drafter: {r['bundle_drafter']} (D = {r['draft_len']}); greedy, {r['max_tokens']} new tokens; "
             f"{r['requests_per_path']} requests per path; 1-minute load average before / after: "
             f"{r['loadavg_1min'][0]} / {r['loadavg_1min'][1]}.", "",
             "| what | median |", "|---|---|",
             f"| tritonserver start to ready (worker loads the bundle), {len(r['start_to_ready_s'])} starts | "
             f"{statistics.median(r['start_to_ready_s']):.2f} s (all: {', '.join(map(str, r['start_to_ready_s']))}) |",
             f"| stop (unload, processes and /dev/shm gone) | {statistics.median(r['stop_s']):.2f} s |",
             f"| reference decoder load in-process (no Triton) | {r['direct_load_s']:.2f} s |"]
    for k, label in (("grpc_stream", "gRPC streaming"), ("grpc", "gRPC, one response"), ("http", "HTTP generate"),
                     ("direct", "reference decoder in-process")):
        med_k = r["median"][k]
        first = f"first response {med_k['first_s'] * 1000:.0f} ms, " if "first_s" in med_k else ""
        ratio = f" ({r['overhead_vs_direct'][k]:.2f}x direct)" if k in r["overhead_vs_direct"] else ""
        same = f"; text identical to direct {r['identical_to_direct'][k]}/{r['requests_per_path']}" \
            if k in r["identical_to_direct"] else ""
        lines.append(f"| {label} | {first}total {med_k['total_s'] * 1000:.0f} ms{ratio}{same} |")
    lines.append(f"| responses per streamed request | {r['responses_per_streamed_request']:.0f} "
                 f"(for {r['tokens_per_request']:.0f} tokens) |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--starts", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--md", type=Path, help="also write the markdown (benchmarks/triton_preview.md)")
    args = ap.parse_args()
    result = run(args)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    recipe = json.loads((args.bundle / "manifest.json").read_text()).get("recipe_file", "?")
    argv = [f"<bundle of {recipe}>" if a == str(args.bundle) else (Path(a).name if a.startswith("/") else a)
            for a in sys.argv[1:]]
    rec = {"benchmark": "triton_preview", "date": time.strftime("%Y-%m-%d"), "commit": commit,
           "command": " ".join(["benchmarks/triton_preview.py", *argv]), "machine": machine(), "result": result}
    r = result
    rec["readme"] = [
        {"what": "Triton CPU preview: tritonserver 2.51 start to ready with the bundle loaded",
         "result": f"{statistics.median(r['start_to_ready_s']):.1f} s", "where": "benchmarks/triton_preview.md"},
        {"what": f"Triton CPU preview: streamed gRPC request, {r['max_tokens']} tokens ({r['bundle_drafter']})",
         "result": f"first response {r['median']['grpc_stream']['first_s'] * 1000:.0f} ms, total "
                   f"{r['median']['grpc_stream']['total_s']:.2f} s = {r['overhead_vs_direct']['grpc_stream']:.2f}x "
                   "the reference decoder alone", "where": "benchmarks/triton_preview.md"}]
    print(markdown(rec))
    if args.md:
        args.md.write_text("# Triton CPU preview: start-up and request times\n\n" + __doc__.split("\n\n", 1)[1]
                           + "\n## Result\n\n" + markdown(rec))
    if args.json:
        args.json.write_text(json.dumps(rec, indent=1) + "\n")


if __name__ == "__main__":
    main()

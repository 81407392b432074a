"""A real Triton Inference Server (the nvidia-pytriton wheel's tritonserver 2.51, installed by
``scripts/setup.sh --dev``) serving the CPU preview of a bundle's llmapi repository: the bundle of the CPU default
mechanism (EAGLE-3) built from a tiny random target, through ``trtllm-spec build`` / ``triton --preview``.

Every test has a hard deadline (SIGALRM) on top of the bounded waits of the client and the server. The tests share
one server (module fixture) and hold in any order (run forward and reversed): none names an order (the first test
was called ``test_0_...``), and each that sends a bad or hostile request checks that the next one is served.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, tiny_suite_items

np = pytest.importorskip("numpy")
grpcclient = pytest.importorskip("tritonclient.grpc")

PROMPT = "w1 w2 w3 w4 w1 w2 w3"
MAX_TOKENS = 12
DEADLINE_S = 120  # per test


def _triton_or_skip():
    from trtllm_spec.errors import DependencyMissing
    from trtllm_spec.serve.triton import find_triton

    try:
        return find_triton()
    except DependencyMissing as exc:
        pytest.skip(f"no Triton venv here ({exc}); scripts/setup.sh --dev installs it")


@pytest.fixture(autouse=True)
def hard_deadline(request):
    limit = DEADLINE_S  # module fixtures (bundle build, server start) come first, under their own bounds

    def expired(*_):
        raise TimeoutError(f"{request.node.name} ran past its {limit} s deadline")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, limit)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, old)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """A bundle of the CPU default mechanism (EAGLE-3, two training steps) over a tiny random target whose greedy
    text varies token to token."""
    _triton_or_skip()
    from click.testing import CliRunner

    import trtllm_spec.data.suite as suite
    from tests.tiny import write_conversations, write_model
    from trtllm_spec.cli import main

    tmp = tmp_path_factory.mktemp("triton-bundle")
    target = write_model(tmp / "target", init=0.5)
    data = write_conversations(tmp / "c.jsonl", 16)
    recipe = {"name": "tiny-triton", "target": {"model": str(target)}, "draft_len": 2,
              "drafter": {"type": "eagle3", "draft_vocab_size": 64, "training": {
                  "max_steps": 2, "batch_size": 2, "seq_len": 64, "precision": "fp32", "checkpoint_every": 2,
                  "data": {"path": str(data), "eval_fraction": 0.25}}},
              "hardware": {"gpu": "l40s"}, "workload": {"batch_sizes": [1, 8], "isl": 64, "osl": 32},
              "planner": {"max_draft_len": 4},
              "measure": {"num_prompts": 1, "max_new_tokens": 12, "categories": ["coding"]}}
    (tmp / "r.yaml").write_text(yaml.safe_dump(recipe))
    with pytest.MonkeyPatch.context() as mp:  # the tiny vocabulary's suite (tests/conftest.py tiny_suite)
        mp.setenv("TRTLLM_SPEC_CACHE", str(tmp / "cache"))
        mp.setattr(suite, "build_suite", lambda name="speed-lite", categories=None, num_prompts=10, seed=0, **kw:
                   tiny_suite_items(categories, 1))
        r = CliRunner().invoke(main, ["build", str(tmp / "r.yaml"), "--out", str(tmp / "bundle")],
                               catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return tmp / "bundle"


@pytest.fixture(scope="module")
def repo(bundle, tmp_path_factory):
    from click.testing import CliRunner

    from trtllm_spec.cli import main

    out = tmp_path_factory.mktemp("preview") / "triton"
    r = CliRunner().invoke(main, ["triton", str(bundle), "--out", str(out), "--preview", "reference"],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture(scope="module")
def server(repo, tmp_path_factory):
    from trtllm_spec.serve.triton import TritonServer

    srv = TritonServer(repo, log_file=tmp_path_factory.mktemp("triton-log") / "triton.log")
    srv.start(timeout_s=300)
    try:
        yield srv
    finally:
        prefix, pgid = srv.shm_prefix, srv.proc.pid if srv.proc else None
        srv.stop()
        assert not list(Path("/dev/shm").glob(prefix + "*")), "shared memory left in /dev/shm"
        if pgid:
            with pytest.raises(ProcessLookupError):
                os.killpg(pgid, 0)  # no process of the server's session is left


@pytest.fixture(scope="module")
def greedy(bundle):
    """Target-only greedy text for PROMPT (runtime.generate on the bundle's own target copy)."""
    import torch
    from transformers import AutoTokenizer

    from trtllm_spec.runtime.generate import generate
    from trtllm_spec.runtime.llama import LlamaModel

    target = LlamaModel.from_pretrained(bundle / "target", dtype=torch.float32, device="cpu")
    tok = AutoTokenizer.from_pretrained(bundle / "target")
    eos = tuple(target.cfg.eos_token_ids) + ((tok.eos_token_id,) if tok.eos_token_id is not None else ())
    out = generate(target, tok(PROMPT).input_ids, MAX_TOKENS, eos)
    return tok.decode(out, skip_special_tokens=True)


def client_snippet() -> dict:
    """The client code of docs/triton_preview.md, executed verbatim."""
    text = (REPO / "docs" / "triton_preview.md").read_text()
    code = re.search(r"<!-- client snippet[^>]*-->\n```python\n(.*?)```", text, re.S).group(1)
    ns: dict = {}
    exec(compile(code, "docs/triton_preview.md", "exec"), ns)  # noqa: S102 (our own documentation)
    return ns


def _input(name, value):
    from tritonclient.utils import np_to_triton_dtype

    t = grpcclient.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
    t.set_data_from_numpy(value)
    return t


def infer_stream(server, inputs: list, timeout_s: float = 60) -> list:
    """Send one request on a gRPC stream; every (result, error) until the final flag or an error."""
    import queue

    got: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    try:
        client.async_stream_infer("tensorrt_llm", inputs, enable_empty_final_response=True)
        out = []
        while True:
            result, error = got.get(timeout=timeout_s)
            out.append((result, error))
            if error is not None or result.get_response().parameters["triton_final_response"].bool_param:
                return out
    finally:
        client.stop_stream()
        client.close()


def text_input(prompt: str = PROMPT):
    return _input("text_input", np.array([prompt.encode()], dtype=object))


# ---- the tests ------------------------------------------------------------------------------------------------

def test_preview_repository_keeps_the_gpu_config(server, repo, bundle, tmp_path):
    """The default bundle's repository loads in real Triton (the server fixture waited for ready); it is the GPU
    node's repository plus model.py / preview.json: config.pbtxt and model.yaml are byte for byte the same."""
    from trtllm_spec.deploy.triton import check_triton_repo
    from trtllm_spec.stages.triton import triton_from_bundle

    plain = tmp_path / "plain"
    triton_from_bundle(bundle, plain, force=False, model_name="tensorrt_llm")
    for rel in ("tensorrt_llm/config.pbtxt", "tensorrt_llm/1/model.yaml", "launch_triton.sh"):
        assert (repo / rel).read_text() == (plain / rel).read_text(), rel
    assert (repo / "tensorrt_llm/1/model.py").is_file() and not (plain / "tensorrt_llm/1/model.py").exists()
    from trtllm_spec.core.bundle import read_bundle

    assert check_triton_repo(repo, profile=read_bundle(bundle).profile) == []
    readme = (repo / "README.md").read_text()
    assert "CPU PREVIEW" in readme and "What differs from the GPU node" in readme
    assert server.model_states()["tensorrt_llm"][0] == "READY"
    assert server.started_s is not None and server.started_s < 300


def test_streamed_grpc_is_per_step_and_equals_target_only_greedy(server, greedy):
    steps = client_snippet()["stream_grpc"](server.grpc_url, PROMPT, MAX_TOKENS)
    texts, finals = [t for t, _ in steps], [f for _, f in steps]
    assert len(set(greedy.split())) > 3  # the tiny target's greedy text varies, so equality means something
    assert texts[-1] == greedy
    assert finals[-1] and not any(finals[:-1])  # one final flag, on the last response
    assert len(set(texts)) >= 3  # responses per decoding step, not one at the end
    assert all(greedy.startswith(t) for t in texts)  # each carries the whole text so far


def test_http_generate_stream_snippet(server, greedy):
    texts = client_snippet()["generate_stream_http"](server.url, PROMPT, MAX_TOKENS)
    assert len(texts) >= 3 and texts[-1] == greedy


def test_non_streaming_request_gets_one_response(server, greedy):
    got = infer_stream(server, [text_input(), _input("streaming", np.array([False])),
                                _input("sampling_param_max_tokens", np.array([MAX_TOKENS], dtype=np.int32))])
    assert len(got) == 1 and got[0][1] is None
    result = got[0][0]
    assert result.get_response().parameters["triton_final_response"].bool_param
    assert result.as_numpy("text_output")[0].decode() == greedy
    # HTTP generate (not streaming) too: one JSON answer
    import urllib.request

    body = json.dumps({"text_input": PROMPT, "sampling_param_max_tokens": MAX_TOKENS}).encode()
    with urllib.request.urlopen(urllib.request.Request(f"{server.url}/v2/models/tensorrt_llm/generate", data=body),
                                timeout=60) as r:
        assert json.loads(r.read())["text_output"] == greedy


def test_every_output_has_the_dtype_config_pbtxt_declares(server, repo):
    """Triton 2.51 does not check a python model's output types against config.pbtxt: check them here."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    mc = text_format.Parse((repo / "tensorrt_llm/config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    declared = {o.name: model_config_pb2.DataType.Name(o.data_type).removeprefix("TYPE_") for o in mc.output}
    declared = {k: "BYTES" if v == "STRING" else v for k, v in declared.items()}
    flags = ("return_finish_reason", "return_stop_reason", "sampling_param_return_perf_metrics")
    got = infer_stream(server, [text_input(), _input("streaming", np.array([True])),
                                _input("sampling_param_max_tokens", np.array([6], dtype=np.int32)),
                                *(_input(f, np.array([True])) for f in flags)])
    assert all(e is None for _, e in got) and len(got) >= 2
    seen = set()
    for result, _ in got:
        for out in result.get_response().outputs:
            assert out.datatype == declared[out.name], (out.name, out.datatype, declared[out.name])
            value = result.as_numpy(out.name)
            assert value.shape == (1,), (out.name, value.shape)
            seen.add(out.name)
    assert seen == {"text_output", "finish_reason", "stop_reason", "arrival_time_ns", "first_scheduled_time_ns",
                    "first_token_time_ns", "last_token_time_ns", "acceptance_rate", "total_accepted_draft_tokens",
                    "total_draft_tokens"}
    last = got[-1][0]
    assert last.as_numpy("finish_reason")[0] == b"length"
    assert last.as_numpy("total_draft_tokens")[0] >= last.as_numpy("total_accepted_draft_tokens")[0] >= 0
    assert last.as_numpy("last_token_time_ns")[0] >= last.as_numpy("first_token_time_ns")[0] > 0


@pytest.mark.parametrize("case", ["empty", "wrong_type", "best_of", "two_prompts", "lora_left_out", "top_p"])
def test_bad_request_gets_an_error_not_a_hang(server, case):
    inputs = {"empty": [text_input("")],
              "wrong_type": [_input("text_input", np.array([7], dtype=np.int32))],
              "best_of": [text_input(), _input("sampling_param_best_of", np.array([2], dtype=np.int32))],
              "two_prompts": [_input("text_input", np.array([b"w1", b"w2"], dtype=object))],
              "lora_left_out": [text_input(), _input("lora_id", np.array([1], dtype=np.uint64))],
              "top_p": [text_input(), _input("sampling_param_top_p", np.array([1.5], dtype=np.float32))]}[case]
    t0 = time.monotonic()
    got = infer_stream(server, inputs, timeout_s=30)
    error = got[-1][1]
    assert error is not None and time.monotonic() - t0 < 30
    message = error.message()
    assert {"empty": "text_input is empty", "wrong_type": "data-type is 'INT32', but model 'tensorrt_llm' expects 'BYTES'", "best_of": "sampling_param_best_of=2",
            "two_prompts": "one prompt", "lora_left_out": "unexpected inference input 'lora_id'",
            "top_p": "sampling_param_top_p 1.5 (in (0, 1])"}[case] in message, message
    # the model keeps serving after a bad request
    ok = infer_stream(server, [text_input(), _input("sampling_param_max_tokens", np.array([2], dtype=np.int32))])
    assert ok[-1][1] is None


def test_repository_without_the_decoupled_policy_is_refused_before_triton(repo, bundle, tmp_path):
    from trtllm_spec.errors import UserError
    from trtllm_spec.stages.triton import preview_server

    broken = tmp_path / "triton"
    shutil.copytree(repo, broken)
    cfg = broken / "tensorrt_llm" / "config.pbtxt"
    text = cfg.read_text()
    cfg.write_text(re.sub(r"model_transaction_policy \{\n  decoupled: true\n\}\n", "", text))
    assert cfg.read_text() != text
    with pytest.raises(UserError, match="model_transaction_policy.decoupled is false"):
        preview_server(bundle, broken, http_port=None, grpc_port=None, log_file=None)


def test_missing_model_py_is_refused_before_triton(repo, tmp_path):
    from trtllm_spec.errors import UserError
    from trtllm_spec.serve.triton import TritonServer

    broken = tmp_path / "triton"
    shutil.copytree(repo, broken)
    (broken / "tensorrt_llm/1/model.py").unlink()
    srv = TritonServer(broken)
    t0 = time.monotonic()
    with pytest.raises(UserError, match=r"tensorrt_llm/1/model.py missing: Triton would stay in LOADING forever"):
        srv.start(timeout_s=60)
    assert time.monotonic() - t0 < 5 and srv.proc is None


def test_serve_triton_stops_everything_on_sigterm(bundle, tmp_path):
    """``assets serve-triton`` (its own preview repository in a temporary folder): ready, answers, and SIGTERM
    ends the server, the model's processes, the /dev/shm regions and the temporary folders."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)}
    shm_before = {n for n in os.listdir("/dev/shm") if n.startswith("trtllm_spec_")}  # our prefix
    proc = subprocess.Popen([sys.executable, "-m", "trtllm_spec", "assets", "serve-triton", str(bundle)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        url = proc.stdout.readline().strip()  # printed once ready
        assert url.startswith("http://127.0.0.1:"), proc.stderr.read() if proc.poll() is not None else url
        import urllib.request

        with urllib.request.urlopen(f"{url}/v2/health/ready", timeout=10) as r:
            assert r.status == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        triton_pid = int(re.search(r"\(pid (\d+),", proc.stderr.read()).group(1))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    for session in (proc.pid, triton_pid):  # Triton runs in a session of its own, with the stub and the worker
        with pytest.raises(ProcessLookupError):
            os.killpg(session, 0)
    assert not {n for n in os.listdir("/dev/shm") if n.startswith("trtllm_spec_")} - shm_before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("trtllm-spec-")]


def test_a_model_that_cannot_load_fails_the_start_with_its_reason(repo, tmp_path):
    """The worker cannot load (preview.json names a folder that is no bundle): Triton fails the model and exits,
    and the start names the model and the worker's reason within seconds, leaving nothing behind."""
    from trtllm_spec.errors import UserError
    from trtllm_spec.serve.triton import TritonServer

    broken = tmp_path / "triton"
    shutil.copytree(repo, broken)
    cfg = broken / "tensorrt_llm/1/preview.json"
    cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "bundle": str(tmp_path)}))
    srv = TritonServer(broken, log_file=tmp_path / "triton.log")
    t0 = time.monotonic()
    with pytest.raises(UserError, match=r"could not load model 'tensorrt_llm': .*has no manifest.json; is it a bundle"):
        srv.start(timeout_s=90)
    assert time.monotonic() - t0 < 60 and srv.proc is None and not srv.leftovers()


def test_stop_string_ends_the_request_with_its_reason(server, greedy):
    stop = greedy.split()[3]
    got = infer_stream(server, [text_input(), _input("sampling_param_max_tokens", np.array([MAX_TOKENS], dtype=np.int32)),
                                _input("sampling_param_stop", np.array([stop.encode()], dtype=object)),
                                _input("return_finish_reason", np.array([True])),
                                _input("return_stop_reason", np.array([True]))])
    result, error = got[-1]
    assert error is None and len(got) == 1
    assert result.as_numpy("text_output")[0].decode() == greedy[:greedy.index(stop)]
    assert result.as_numpy("finish_reason")[0] == b"stop" and result.as_numpy("stop_reason")[0] == stop.encode()


def test_serve_triton_refuses_a_preview_whose_bundle_moved(cli, repo, tmp_path):
    broken = tmp_path / "triton"
    shutil.copytree(repo, broken)
    cfg = broken / "tensorrt_llm/1/preview.json"
    cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "bundle": str(tmp_path / "gone")}))
    r = cli("assets", "serve-triton", tmp_path / "gone", "--repo", broken)
    assert r.exit_code == 2 and "has no manifest.json (was the bundle moved?)" in r.output, r.output


# ---- hostile input (issue 46, item 5): each gets an error response (or is served), and the next request is served --

def assert_still_serves(server, greedy) -> None:
    """The next ordinary request after a hostile one: served, target-only greedy."""
    got = infer_stream(server, [text_input(), _input("sampling_param_max_tokens", np.array([MAX_TOKENS], dtype=np.int32))],
                       timeout_s=60)
    assert got[-1][1] is None, got[-1][1]
    assert got[-1][0].as_numpy("text_output")[0].decode() == greedy


HOSTILE = {
    "prompt_longer_than_the_context": ([text_input("w1 " * 3000)], "exceed the target's 2048 positions"),
    "prompt_of_no_tokens": ([text_input("   ")], "text_input '   ' tokenizes to no tokens"),
    "text_input_not_utf8": ([_input("text_input", np.array([b"w1 \xff\xfe w2"], dtype=object))],
                            "text_input is not UTF-8 text (invalid start byte at byte 3)"),
    "stop_not_utf8": ([text_input(), _input("sampling_param_stop", np.array([b"\xc3"], dtype=object))],
                      "sampling_param_stop is not UTF-8 text"),
    "negative_max_tokens": ([text_input(), _input("sampling_param_max_tokens", np.array([-5], dtype=np.int32))],
                            "sampling_param_max_tokens -5 must be >= 1"),
    "zero_max_tokens": ([text_input(), _input("sampling_param_max_tokens", np.array([0], dtype=np.int32))],
                        "sampling_param_max_tokens 0 must be >= 1"),
    "huge_max_tokens": ([text_input(), _input("sampling_param_max_tokens",
                                              np.array([np.iinfo(np.int32).max], dtype=np.int32))],
                        "sampling_param_max_tokens 2147483647 exceed the target's 2048 positions"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_request_gets_an_error_and_the_next_is_served(server, greedy, case):
    inputs, message = HOSTILE[case]
    t0 = time.monotonic()
    got = infer_stream(server, inputs, timeout_s=60)
    error = got[-1][1]
    assert error is not None and message in error.message(), (error and error.message())
    assert time.monotonic() - t0 < 60
    assert_still_serves(server, greedy)


DISCONNECTING_CLIENT = """
import sys, numpy as np, tritonclient.grpc as g
from tritonclient.utils import np_to_triton_dtype
def inp(name, v):
    t = g.InferInput(name, list(v.shape), np_to_triton_dtype(v.dtype)); t.set_data_from_numpy(v); return t
c = g.InferenceServerClient(sys.argv[1])
c.start_stream(callback=lambda result, error: print("response", flush=True))
c.async_stream_infer("tensorrt_llm", [inp("text_input", np.array([sys.argv[2].encode()], dtype=object)),
                                      inp("streaming", np.array([True])),
                                      inp("sampling_param_max_tokens", np.array([1900], dtype=np.int32))])
import time; time.sleep(600)
"""


def test_a_client_that_disconnects_mid_stream_is_cancelled_and_the_next_is_served(server, greedy, tmp_path):
    """A streaming client killed after its first responses (its connection drops): the preview stops decoding for
    it (it asked for 1900 tokens, minutes on this CPU), so the next request is answered within seconds."""
    script = tmp_path / "client.py"
    script.write_text(DISCONNECTING_CLIENT)
    proc = subprocess.Popen([sys.executable, str(script), server.grpc_url, PROMPT], stdout=subprocess.PIPE, text=True)
    try:
        for _ in range(3):
            assert proc.stdout.readline().strip() == "response"  # it is being served, step by step
    finally:
        proc.kill()
        proc.wait()
    t0 = time.monotonic()
    assert_still_serves(server, greedy)
    assert time.monotonic() - t0 < 20, "the next request waited for the disconnected client's 1900 tokens"


def test_sixteen_concurrent_streams_are_each_served(server, greedy):
    """16 clients streaming at once: the preview runs them one at a time (batch size 1), each gets its whole,
    correct text; then the next request is served."""
    from concurrent.futures import ThreadPoolExecutor

    stream = client_snippet()["stream_grpc"]
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda _: stream(server.grpc_url, PROMPT, MAX_TOKENS, timeout_s=100), range(16)))
    for steps in results:
        assert steps[-1] == (greedy, True) and not any(final for _, final in steps[:-1])
    assert_still_serves(server, greedy)


def test_a_stop_request_cancels_the_stream_it_names_and_the_next_is_served(server, greedy):
    """The llmapi contract's ``stop`` input with the request id of a stream asking for 1900 tokens: both get
    'Request cancelled by client', the worker stops decoding it, and the next request is answered within seconds."""
    import queue

    got: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    try:
        client.async_stream_infer("tensorrt_llm", [text_input(), _input("streaming", np.array([True])),
                                                   _input("sampling_param_max_tokens", np.array([1900], dtype=np.int32))],
                                  request_id="long-1", enable_empty_final_response=True)
        assert got.get(timeout=60)[1] is None  # decoding, step by step
        stopper = grpcclient.InferenceServerClient(server.grpc_url)
        answers: queue.Queue = queue.Queue()
        stopper.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            stopper.async_stream_infer("tensorrt_llm", [text_input("w1"), _input("stop", np.array([True]))],
                                       request_id="long-1")
            assert "Request cancelled by client" in answers.get(timeout=30)[1].message()
        finally:
            stopper.stop_stream()
            stopper.close()
        t0 = time.monotonic()
        while True:  # the long stream ends with the cancellation, not after its 1900 tokens
            result, error = got.get(timeout=30)
            if error is not None:
                assert "Request cancelled by client" in error.message()
                break
            assert not result.get_response().parameters["triton_final_response"].bool_param
        assert time.monotonic() - t0 < 20
    finally:
        client.stop_stream()
        client.close()
    t0 = time.monotonic()
    assert_still_serves(server, greedy)
    assert time.monotonic() - t0 < 20, "the next request waited for the stopped request's 1900 tokens"

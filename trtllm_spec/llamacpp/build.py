"""llama.cpp's native binaries (``llama-server``, ``llama-speculative-simple``) built from source, cached.

The sources are the ones vendored in the ``llama-cpp-python`` sdist pinned here (``LLAMA_CPP_PYTHON``; ``vendor/llama.cpp``,
with its git HEAD under ``.git/modules/vendor/llama.cpp``); the sdist comes from PyPI through pip
(``pip download --no-deps --no-binary :all:``), or from ``--source`` (the sdist file, its unpacked folder, or a
llama.cpp checkout). No prebuilt binary is downloaded: the cmake call turns off the prebuilt web UI
(``LLAMA_USE_PREBUILT_UI=OFF``) and curl/OpenSSL, and builds statically so the cached binaries stand alone.

Instructions: on x86 the build names each instruction set this CPU reports (``GGML_AVX2``, ``GGML_AVX512_BF16``
...; ``isa_flags``) instead of ``-march=native``, and never AMX: a VM here reported ``amx_tile`` in /proc/cpuinfo
yet trapped its instructions (SIGILL at ``tileloadd`` in libggml-cpu, on the quantized GGUF's first prompt), and
the one build serves quantized GGUFs (``assets serve``, the tests' server) as well as f32/bf16 ones. Other
architectures build with ``GGML_NATIVE=ON``.

Cache: ``<cache>/llamacpp/<source>-<cpu>/`` holding ``bin/``, ``convert/`` (the converter and the gguf-py it
needs, from the same sources) and ``build.json`` (written last). ``<cpu>`` hashes the machine, the CPU feature
flags and the cmake flags they give, so a cache shared between machines never runs a binary built for other
instructions.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trtllm_spec.core.files import write_json_atomic
from trtllm_spec.core.targets import cache_dir
from trtllm_spec.errors import DependencyMissing, UserError

LLAMA_CPP_PYTHON = "0.3.36"  # its sdist vendors the llama.cpp we build (the package itself is never installed)
BINARIES = ("llama-server", "llama-speculative-simple")
CMAKE_FLAGS = ("-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_CURL=OFF",
               "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=ON",
               "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF")
# the flags GGML_NATIVE's -march=native turns into code paths (x86 /proc/cpuinfo 'flags', Arm 'Features')
CPU_FLAGS = ("sse3", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "bmi2", "avx_vnni", "avx512f",
             "avx512bw", "avx512dq", "avx512vl", "avx512cd", "avx512_vnni", "avx512_bf16", "avx512_fp16",
             "avx512vbmi", "amx_tile", "amx_int8", "amx_bf16", "asimd", "asimddp", "sve", "sve2", "i8mm", "bf16",
             "fphp", "asimdhp")
# x86: ggml's instruction options (ggml/CMakeLists.txt of the vendored commit) and the cpuinfo flags each needs
X86_ISA = (("GGML_SSE42", ("sse4_2",)), ("GGML_AVX", ("avx",)), ("GGML_AVX2", ("avx2",)), ("GGML_BMI2", ("bmi2",)),
           ("GGML_FMA", ("fma",)), ("GGML_F16C", ("f16c",)), ("GGML_AVX_VNNI", ("avx_vnni",)),
           ("GGML_AVX512", ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")),
           ("GGML_AVX512_VBMI", ("avx512vbmi",)), ("GGML_AVX512_VNNI", ("avx512_vnni",)),
           ("GGML_AVX512_BF16", ("avx512_bf16",)))
NEVER = ("-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF")  # see the module docstring
CONVERT_PARTS = ("convert_hf_to_gguf.py", "conversion", "gguf-py")
DEBIAN_PACKAGES = "cmake g++ (and ninja-build for a faster build)"


@dataclass(frozen=True)
class LlamaCppBuild:
    folder: Path
    record: dict

    def binary(self, name: str) -> Path:
        return self.folder / "bin" / name

    @property
    def converter(self) -> Path:
        return self.folder / "convert" / "convert_hf_to_gguf.py"

    @property
    def version(self) -> str:
        return f"llama.cpp {self.record['commit'][:12]} (llama-cpp-python {self.record['package_version']} sdist)"


def cpu_features() -> list[str]:
    """The CPU feature flags of CPU_FLAGS this machine has (empty where /proc/cpuinfo is missing)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    have: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            have |= set(value.split())
    return [f for f in CPU_FLAGS if f in have]


def isa_flags(machine: str | None = None, features: list[str] | None = None) -> list[str]:
    """The cmake instruction flags for this CPU: each of ggml's x86 options on or off by the features reported
    (AMX always off), ``GGML_NATIVE=ON`` elsewhere."""
    machine = machine or platform.machine()
    if machine.lower() not in ("x86_64", "amd64", "i686", "i386"):
        return ["-DGGML_NATIVE=ON"]
    have = set(cpu_features() if features is None else features)
    return (["-DGGML_NATIVE=OFF"] + [f"-D{opt}={'ON' if all(f in have for f in need) else 'OFF'}"
                                     for opt, need in X86_ISA] + list(NEVER))


def cmake_flags() -> list[str]:
    return [*CMAKE_FLAGS, *isa_flags()]


def cpu_key() -> str:
    blob = json.dumps([platform.machine(), cpu_features(), cmake_flags()])
    return f"{platform.machine()}-{hashlib.sha256(blob.encode()).hexdigest()[:10]}"


def builds_root(cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / "llamacpp"


def build_folder(cache: Path | None = None, source_id: str | None = None) -> Path:
    return builds_root(cache) / f"{source_id or 'llama-cpp-python-' + LLAMA_CPP_PYTHON}-{cpu_key()}"


def find_build(cache: Path | None = None, source_id: str | None = None) -> LlamaCppBuild | None:
    """The finished build for this machine, or None."""
    folder = build_folder(cache, source_id)
    meta = folder / "build.json"
    if not meta.is_file():
        return None
    build = LlamaCppBuild(folder, json.loads(meta.read_text()))
    return build if all(build.binary(b).is_file() for b in BINARIES) else None


def require_toolchain() -> dict[str, str]:
    tools = {"cmake": shutil.which("cmake"), "c++": next(filter(None, map(shutil.which, ("c++", "g++", "clang++"))),
                                                          None),
             "cc": next(filter(None, map(shutil.which, ("cc", "gcc", "clang"))), None)}
    missing = [k for k, v in tools.items() if not v]
    if missing:
        raise DependencyMissing(f"building llama.cpp needs cmake and a C/C++ compiler; missing: {', '.join(missing)}. "
                                f"Install them (Debian/Ubuntu: apt-get install {DEBIAN_PACKAGES}) and rerun "
                                "'trtllm-spec assets build-llamacpp'")
    tools["ninja"] = shutil.which("ninja") or ""
    return tools


def sdist_path(cache: Path | None = None) -> Path:
    """Where the downloaded sdist is kept, so a build for another CPU (or ``--force``) needs no network."""
    return builds_root(cache) / "src" / f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"


def ensure_build(cache: Path | None = None, *, source: Path | None = None, jobs: int = 2, force: bool = False,
                 download: bool = True, log: Callable[[str], None] = lambda _m: None) -> tuple[LlamaCppBuild, bool]:
    """The cached build for this machine, building it first when absent (or ``force``). Returns (build, built).
    ``download=False`` (the commands other than ``assets build-llamacpp``, which use no network): build only from
    ``source`` or the kept sdist, else refuse naming the command that downloads it. Two processes asking at once:
    the second waits on a lock file and reuses the first one's build."""
    if jobs < 1:
        raise UserError(f"--jobs {jobs}: give at least 1 parallel compile job")
    if source is not None and not source.exists():
        raise UserError(f"--source {source} does not exist; give the llama-cpp-python sdist (.tar.gz), its unpacked "
                        "folder or a llama.cpp checkout, or drop --source to download the pinned sdist")
    source_id = _source_id(source) if source is not None else None
    root = builds_root(cache)
    root.mkdir(parents=True, exist_ok=True)
    folder = build_folder(cache, source_id)
    with _locked(root / f".{folder.name}.lock"):
        found = find_build(cache, source_id)
        if found is not None and not force:
            log(f"llama.cpp: cached build {found.folder} ({found.version})")
            return found, False
        if source is None and sdist_path(cache).is_file():
            source = sdist_path(cache)
        if source is None and not download:
            raise UserError("llama.cpp is not built on this machine yet; run 'trtllm-spec assets build-llamacpp' "
                            f"once (it downloads the llama-cpp-python=={LLAMA_CPP_PYTHON} sdist from PyPI and builds "
                            "for minutes), or give it --source SDIST")
        tools = require_toolchain()
        with tempfile.TemporaryDirectory(prefix=".build-", dir=root) as tmp:
            work = Path(tmp)
            if source is None:
                kept = sdist_path(cache)
                kept.parent.mkdir(parents=True, exist_ok=True)
                _download_sdist(work, log).replace(kept)
                source = kept
            src, package_version, commit = _sources(source, work, log)
            started = time.perf_counter()
            _cmake(src, work / "build", tools, jobs, log)
            out = work / "out"
            (out / "bin").mkdir(parents=True)
            for b in BINARIES:
                shutil.copy2(work / "build" / "bin" / b, out / "bin" / b)
            (out / "convert").mkdir()
            for part in CONVERT_PARTS:
                (shutil.copytree if (src / part).is_dir() else shutil.copy2)(src / part, out / "convert" / part)
            record = {"package_version": package_version, "commit": commit, "cpu": cpu_key(),
                      "cpu_features": cpu_features(), "cmake_flags": cmake_flags(), "jobs": jobs,
                      "generator": "Ninja" if tools["ninja"] else "Unix Makefiles",
                      "build_s": round(time.perf_counter() - started, 1), "source": str(source),
                      "machine": platform.processor() or platform.machine(), "python": sys.version.split()[0]}
            write_json_atomic(out / "build.json", record)
            if folder.exists():
                shutil.rmtree(folder)
            out.rename(folder)
        build = LlamaCppBuild(folder, record)
        log(f"llama.cpp: built {', '.join(BINARIES)} in {record['build_s']:.0f} s -> {folder}")
        return build, True


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _source_id(source: Path) -> str:
    """A user-given source is cached by its content's identity: the sdist file's hash, else its git HEAD."""
    if source.is_file():
        digest = hashlib.sha256()
        with open(source, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        return f"sdist-{digest.hexdigest()[:12]}"
    root = source / "vendor" / "llama.cpp" if (source / "vendor" / "llama.cpp").is_dir() else source
    return f"src-{_git_head(root)[:12]}"


def _git_head(llama_dir: Path) -> str:
    """The commit of a llama.cpp tree: ``.git`` (a folder, or a submodule's 'gitdir:' file) -> HEAD."""
    git = llama_dir / ".git"
    if git.is_file():
        git = (llama_dir / git.read_text().split("gitdir:", 1)[-1].strip()).resolve()
    head = git / "HEAD"
    if not head.is_file():
        return "unknown"
    ref = head.read_text().strip()
    if ref.startswith("ref:"):
        target = git / ref.split(None, 1)[1]
        return target.read_text().strip() if target.is_file() else "unknown"
    return ref


def _sources(source: Path, work: Path, log) -> tuple[Path, str, str]:
    """(llama.cpp source folder, llama-cpp-python version or 'checkout', commit), unpacked under ``work``."""
    if source.is_dir():
        llama = source / "vendor" / "llama.cpp" if (source / "vendor" / "llama.cpp").is_dir() else source
        if not (llama / "CMakeLists.txt").is_file() or not (llama / "convert_hf_to_gguf.py").is_file():
            raise UserError(f"--source {source}: no llama.cpp sources there (CMakeLists.txt and convert_hf_to_gguf.py)"
                            "; give the llama-cpp-python sdist or a llama.cpp checkout")
        return llama, "checkout", _git_head(llama)
    sdist = source
    log(f"llama.cpp: unpacking {sdist.name} ...")
    try:
        with tarfile.open(sdist) as tar:
            names = tar.getnames()
            top = names[0].split("/", 1)[0] if names else ""
            wanted = [m for m in tar.getmembers() if m.name.startswith((f"{top}/vendor/llama.cpp/",
                      f"{top}/.git/modules/vendor/llama.cpp/")) and (m.isfile() or m.isdir())]
            tar.extractall(work / "src", members=wanted, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise UserError(f"{sdist}: not a readable llama-cpp-python sdist ({exc}); give the .tar.gz from "
                        f"'pip download --no-deps --no-binary :all: llama-cpp-python=={LLAMA_CPP_PYTHON}'") from None
    llama = work / "src" / top / "vendor" / "llama.cpp"
    if not (llama / "CMakeLists.txt").is_file():
        raise UserError(f"{sdist}: holds no vendor/llama.cpp sources; is it the llama-cpp-python sdist?")
    version = top.rsplit("-", 1)[-1]
    return llama, version, _git_head(llama)


def _download_sdist(work: Path, log) -> Path:
    log(f"llama.cpp: downloading the llama-cpp-python=={LLAMA_CPP_PYTHON} sdist from PyPI (pip, ~77 MB) ...")
    from trtllm_spec.data.model_assets import pip_download

    return pip_download(f"llama-cpp-python=={LLAMA_CPP_PYTHON}", work, sdist=True, pattern="llama_cpp_python-*.tar.gz",
                        fix="or give --source SDIST")[0]


def _cmake(src: Path, build: Path, tools: dict[str, str], jobs: int, log) -> None:
    generator = ["-G", "Ninja"] if tools["ninja"] else []
    env = {**os.environ, "CC": tools["cc"], "CXX": tools["c++"]}
    log("llama.cpp: configuring (cmake) ...")
    _run([tools["cmake"], "-S", str(src), "-B", str(build), *generator, *cmake_flags()], env, build.parent, log)
    log(f"llama.cpp: compiling {', '.join(BINARIES)} with {jobs} job(s) (minutes on 2 cores) ...")
    _run([tools["cmake"], "--build", str(build), "--target", *BINARIES, "-j", str(jobs)], env, build.parent, log,
         progress=True)


def _run(cmd: list[str], env: dict, where: Path, log, progress: bool = False) -> None:
    """Run ``cmd``, logging every tenth of ninja/make's '[n/m]' or '[ p%]' progress; the log file keeps the rest."""
    log_path = where / "build.log"
    tail: list[str] = []
    shown = -1
    started = time.perf_counter()
    with open(log_path, "a") as fh:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            tail = (tail + [line.rstrip()])[-25:]
            frac = _progress(line) if progress else None
            if frac is not None and int(frac * 10) > shown:
                shown = int(frac * 10)
                log(f"llama.cpp: {shown * 10:3d}% compiled ({time.perf_counter() - started:.0f} s)")
        code = proc.wait()
    if code != 0:
        keep = where.parent / "last-build-failure.log"
        with contextlib.suppress(OSError):
            shutil.copy2(log_path, keep)
        raise UserError(f"llama.cpp build failed ({' '.join(cmd[:3])} ... exit {code}); last lines:\n"
                        + "\n".join(tail[-12:]) + f"\nfull log: {keep}")


def _progress(line: str) -> float | None:
    s = line.strip()
    if s.startswith("[") and "]" in s:
        inner = s[1:s.index("]")].strip()
        if "/" in inner:
            n, _, m = inner.partition("/")
            if n.isdigit() and m.isdigit() and int(m) > 0:
                return int(n) / int(m)
        if inner.endswith("%") and inner[:-1].strip().isdigit():
            return int(inner[:-1]) / 100
    return None

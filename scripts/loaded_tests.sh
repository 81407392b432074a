#!/usr/bin/env bash
# README's test command from a fresh clone, several times in a row, each beside a CPU hog on every core (issue 37:
# "a test suite that holds on a loaded machine").
#
#   scripts/loaded_tests.sh            # three runs of HEAD; stops at the first failure
#   RUNS=1 scripts/loaded_tests.sh     # one run
#   FRESH=1 RUNS=1 scripts/loaded_tests.sh
#       a fresh machine (issue 55): empty caches (trtllm-spec's: models, llama.cpp build, the vLLM and Triton venvs;
#       pip's), and the hog already running during scripts/setup.sh --dev: README's whole test command under load,
#       setup and tests timed apart, pytest's 20 slowest tests listed (PYTEST_ADDOPTS=--durations=20)
#
# It clones this checkout's HEAD into a temporary folder, runs `scripts/setup.sh --dev` there once, then per run
# starts Debian's `stress-ng --cpu $(nproc) --timeout 0` (one busy worker per core, at the tests' priority), runs
# `.venv/bin/python -m pytest -q` (README's command) and stops the hog. Each run's pytest output and a summary line
# (commit, exit status, seconds, load average) go to $OUT (default: a new temporary folder, printed first).
# Needs stress-ng (`apt-get install stress-ng`). On a 2-core machine a run takes about 32 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v stress-ng >/dev/null || { echo "error: stress-ng is not installed; apt-get install stress-ng" >&2; exit 2; }
RUNS="${RUNS:-3}"
[[ "$RUNS" =~ ^[1-9][0-9]?$ ]] || { echo "error: RUNS=$RUNS: give a number of runs from 1 to 99" >&2; exit 2; }
OUT="${OUT:-$(mktemp -d -t trtllm-spec-loaded.XXXXXX)}"
mkdir -p "$OUT"
export -n OUT  # our results folder, not the tests': an exported OUT reached the tests' children (issue 37, run at e0344ee)
CLONE="$(mktemp -d -t trtllm-spec-clone.XXXXXX)"
HOG=""
cleanup() { [ -n "$HOG" ] && kill "$HOG" 2>/dev/null; rm -rf "$CLONE"; }
trap cleanup EXIT
echo "results in $OUT"
git clone -q . "$CLONE/repo"
cd "$CLONE/repo"
commit="$(git rev-parse --short HEAD)"
if [ "${FRESH:-0}" = 1 ]; then
  export TRTLLM_SPEC_CACHE="$CLONE/cache" PIP_CACHE_DIR="$CLONE/pip-cache" PYTEST_ADDOPTS="--durations=20"
  unset TRTLLM_SPEC_VLLM_VENV TRTLLM_SPEC_TRITON_VENV
  stress-ng --cpu "$(nproc)" --timeout 0 > "$OUT/stress-setup.log" 2>&1 &
  HOG=$!
fi
start=$(date +%s)
scripts/setup.sh --dev > "$OUT/setup.log" 2>&1 || { echo "setup failed: $OUT/setup.log" >&2; exit 1; }
echo "commit $commit setup $(( $(date +%s) - start )) s (fresh: ${FRESH:-0}, load $(cut -d' ' -f1-3 /proc/loadavg))" \
  | tee -a "$OUT/summary.txt"
if [ -n "$HOG" ]; then kill "$HOG"; wait "$HOG" 2>/dev/null || true; HOG=""; fi
for i in $(seq 1 "$RUNS"); do
  stress-ng --cpu "$(nproc)" --timeout 0 > "$OUT/stress$i.log" 2>&1 &
  HOG=$!
  start=$(date +%s)
  rc=0
  .venv/bin/python -m pytest -q > "$OUT/pytest$i.log" 2>&1 || rc=$?
  line="commit $commit run $i rc=$rc $(( $(date +%s) - start )) s load $(cut -d' ' -f1-3 /proc/loadavg): $(tail -1 "$OUT/pytest$i.log")"
  kill "$HOG"; wait "$HOG" 2>/dev/null || true; HOG=""
  echo "$line" | tee -a "$OUT/summary.txt"
  [ "$rc" -eq 0 ] || exit "$rc"
done

#!/usr/bin/env bash
# Build the Dockerfile's wheel / serve / train targets on local stand-in base images and run the smoke runs in
# them, as the images' non-root user (docs/docker.md "Checked on a machine without a registry").
#
#   scripts/docker_check.sh               # everything; prints a summary (also written to $WORK/summary.txt)
#   HEAVY_LOCK=/tmp/heavy.lock scripts/docker_check.sh   # its three heavy phases (stand-ins, builds, runs)
#                                                        # each under `flock` on that file
#
# For machines that reach no registry (root, Debian): installs docker.io and debootstrap when missing, starts
# dockerd when none answers (and stops only the one it started), builds a Debian bookworm root file system with
# debootstrap, imports it, and builds the stand-ins from docker/standin/Dockerfile (cached as local images). The
# host's pip settings (CA bundle, an http(s) index URL) go into the builds as BuildKit secrets and into the
# containers as a read-only mount, never into an image; the CPU torch wheel comes in through the stand-ins' build
# context (a local wheel folder filled by `pip download` on the host).
#
# Environment: WORK (default /tmp/trtllm-spec-docker-check), TAG (image tag prefix, default trtllm-spec-check),
# TORCH_SPEC (default torch==2.13.0), DEBIAN_MIRROR, PIP_CA (default: pip's `cert` setting or the system bundle),
# KEEP_IMAGES=0 to remove the three target images at the end (the stand-ins stay cached), HEAVY_LOCK.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
WORK="${WORK:-/tmp/trtllm-spec-docker-check}"
TAG="${TAG:-trtllm-spec-check}"
STANDIN="trtllm-spec-standin"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
UID_IN_IMAGE=10001
mkdir -p "$WORK"
SUMMARY="$WORK/summary.txt"
: >"$SUMMARY"

log() { printf '[docker_check %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }
# a phase (debootstrap + stand-ins, the builds, the smoke runs) holds HEAVY_LOCK from lock to unlock (fd 9)
if [ -n "${HEAVY_LOCK:-}" ]; then exec 9>>"$HEAVY_LOCK"; fi
lock() { if [ -n "${HEAVY_LOCK:-}" ]; then log "waiting for $HEAVY_LOCK ($1)"; flock 9; fi; }
unlock() { if [ -n "${HEAVY_LOCK:-}" ]; then flock -u 9; fi; }
record() { printf '%s\n' "$*" | tee -a "$SUMMARY" >&2; }

# ---- tools ------------------------------------------------------------------------------------------------
missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if [ "${#missing[@]}" -gt 0 ]; then
    [ "$(id -u)" = 0 ] || die "needs root to install ${missing[*]} (apt-get)"
    log "installing ${missing[*]}"
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi
# BuildKit is required (RUN --mount). A client with the buildx plugin uses it by default; without buildx, the
# docker.io client (20.10) still drives the daemon's own BuildKit with DOCKER_BUILDKIT=1.
DOCKER="${DOCKER:-}"
if [ -z "$DOCKER" ]; then
    if docker buildx version >/dev/null 2>&1; then DOCKER=docker
    elif [ -x /usr/bin/docker ]; then DOCKER=/usr/bin/docker
    else die "no docker client with BuildKit (install docker-buildx, or docker.io's /usr/bin/docker)"; fi
fi
export DOCKER_BUILDKIT=1

# ---- dockerd ----------------------------------------------------------------------------------------------
STARTED_DOCKERD=""
stop_dockerd() {
    if [ -n "$STARTED_DOCKERD" ]; then
        log "stopping the dockerd this script started (pid $STARTED_DOCKERD)"
        kill "$STARTED_DOCKERD" 2>/dev/null || true
        for _ in $(seq 30); do kill -0 "$STARTED_DOCKERD" 2>/dev/null || break; sleep 1; done
    fi
}
trap stop_dockerd EXIT
if ! "$DOCKER" info >/dev/null 2>&1; then
    [ "$(id -u)" = 0 ] || die "no docker daemon answers and starting one needs root"
    log "starting dockerd (log: $WORK/dockerd.log)"
    dockerd >"$WORK/dockerd.log" 2>&1 9>&- &
    STARTED_DOCKERD=$!
    for _ in $(seq 60); do "$DOCKER" info >/dev/null 2>&1 && break; sleep 1; done
    "$DOCKER" info >/dev/null 2>&1 || die "dockerd did not answer within 60 s (see $WORK/dockerd.log)"
fi
record "docker: client $("$DOCKER" version --format '{{.Client.Version}}'), server $("$DOCKER" version --format '{{.Server.Version}}'), storage $("$DOCKER" info --format '{{.Driver}}')"
record "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"

have_image() { "$DOCKER" image inspect "$1" >/dev/null 2>&1; }
size_of() { "$DOCKER" image inspect --format '{{.Size}}' "$1" | awk '{printf "%.0f MB", $1 / 1e6}'; }

# ---- the host's pip settings, for the builds (secrets) and the containers (read-only mount) ----------------
PIP_CA="${PIP_CA:-$(pip config get global.cert 2>/dev/null || true)}"
PIP_CA="${PIP_CA:-/etc/ssl/certs/ca-certificates.crt}"
[ -r "$PIP_CA" ] || die "CA bundle $PIP_CA not readable; set PIP_CA"
INDEX_URL="${PIP_INDEX_URL:-$(pip config get global.index-url 2>/dev/null || true)}"
mkdir -p "$WORK/pip"
cp "$PIP_CA" "$WORK/pip/ca.crt"
build_conf() {  # pip.conf whose cert is where the CA is inside the build step / the container
    printf '[global]\ncert = %s\ndisable-pip-version-check = true\n' "$1"
    case "$INDEX_URL" in http://*|https://*) printf 'index-url = %s\n' "$INDEX_URL" ;; esac
}
build_conf /run/secrets/pip-ca.crt >"$WORK/pip/build.conf"
build_conf /etc/trtllm-spec-check/ca.crt >"$WORK/pip/pip.conf"
chmod 0644 "$WORK/pip/"*
SECRETS=(--secret "id=pip.conf,src=$WORK/pip/build.conf" --secret "id=pip-ca.crt,src=$WORK/pip/ca.crt")
# what a container needs to reach the index (assets fetch runs pip download inside)
PIP_MOUNT=(-v "$WORK/pip:/etc/trtllm-spec-check:ro" -e PIP_CONFIG_FILE=/etc/trtllm-spec-check/pip.conf)

# ---- stand-in bases ---------------------------------------------------------------------------------------
lock "stand-in bases"
if ! have_image "$STANDIN:rootfs"; then
    rootfs="$WORK/rootfs"
    if [ ! -x "$rootfs/usr/bin/python3" ]; then
        rm -rf "$rootfs"
        log "debootstrap bookworm -> $rootfs"
        t0=$SECONDS
        debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,ca-certificates \
            bookworm "$rootfs" "$DEBIAN_MIRROR" >"$WORK/debootstrap.log" 2>&1 \
            || die "debootstrap (see $WORK/debootstrap.log)"
        record "debootstrap bookworm: $((SECONDS - t0)) s"
    fi
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    bash -c "tar -C '$rootfs' -c . | '$DOCKER' import - '$STANDIN:rootfs'" >/dev/null
    rm -rf "$rootfs"
fi
ctx="$WORK/standin-context"
mkdir -p "$ctx/wheels"
cp docker/standin/fake_trtllm.py "$ctx/"
# shellcheck disable=SC2086
pip download -q -d "$ctx/wheels" $TORCH_SPEC "numpy<2" 2> >(grep -v "is ignored: it is neither" >&2) || die "pip download $TORCH_SPEC numpy<2 on the host"
torch_version=$(ls "$ctx/wheels" | sed -n 's/^torch-\([0-9.]*\).*\.whl$/\1/p' | sort -V | tail -1)
[ -n "$torch_version" ] || die "no torch wheel in $ctx/wheels"
for target in python pytorch trtllm; do
    t0=$SECONDS
    "$DOCKER" build -q -f docker/standin/Dockerfile --target "$target" --build-arg TORCH_VERSION="$torch_version" \
        -t "$STANDIN:$target" "$ctx" >/dev/null || die "stand-in $target"
    record "stand-in $STANDIN:$target: $((SECONDS - t0)) s, $(size_of "$STANDIN:$target")"
done

unlock

# ---- the Dockerfile's targets -----------------------------------------------------------------------------
lock "docker build"
BASES=(--build-arg "PYTHON_IMAGE=$STANDIN:python" --build-arg "PYTORCH_IMAGE=$STANDIN:pytorch"
       --build-arg "TRTLLM_IMAGE=$STANDIN:trtllm")
for target in wheel serve train; do
    t0=$SECONDS
    "$DOCKER" build --progress=plain --target "$target" "${BASES[@]}" "${SECRETS[@]}" \
        -t "$TAG:$target" "$REPO" >"$WORK/build-$target.log" 2>&1 || { tail -30 "$WORK/build-$target.log" >&2; die "docker build --target $target (see $WORK/build-$target.log)"; }
    record "build $TAG:$target: $((SECONDS - t0)) s, $(size_of "$TAG:$target")"
done
for target in serve train; do  # nothing of the host's pip settings is in the image: its pip has no settings at all
    leaked=$("$DOCKER" run --rm --entrypoint pip "$TAG:$target" config list 2>&1)
    [ -z "$leaked" ] || die "$TAG:$target holds pip settings: $leaked"
done

unlock

# ---- smoke runs -------------------------------------------------------------------------------------------
lock "smoke runs"
run_in() { "$DOCKER" run --rm "$@"; }
smoke() {  # smoke NAME EXPECTED_SUBSTRING docker-run-args...
    local name="$1" want="$2" out t0=$SECONDS
    shift 2
    out=$(run_in "$@" 2>&1) || { printf '%s\n' "$out" | tail -30 >&2; die "smoke '$name' exited non-zero"; }
    local file="${name//[^A-Za-z0-9._-]/_}"  # a smoke's name may hold '/', '=' or ','
    printf '%s\n' "$out" >"$WORK/smoke-$file.log"
    case "$out" in *"$want"*) ;; *) printf '%s\n' "$out" | tail -30 >&2; die "smoke '$name': no '$want' in its output";; esac
    record "PASS $name ($((SECONDS - t0)) s)"
}
fail_smoke() {  # fail_smoke NAME EXPECTED_SUBSTRING docker-run-args...: must exit non-zero with that message
    local name="$1" want="$2" out rc=0 t0=$SECONDS
    shift 2
    out=$(run_in "$@" 2>&1) || rc=$?
    [ "$rc" != 0 ] || die "smoke '$name' should have failed"
    case "$out" in *"$want"*) ;; *) printf '%s\n' "$out" | tail -30 >&2; die "smoke '$name': no '$want' in its output";; esac
    record "PASS $name (exit $rc as expected, $((SECONDS - t0)) s)"
}

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml)
for target in serve train; do
    smoke "$target --version" "$version" "$TAG:$target" --version
    smoke "$target runs as uid $UID_IN_IMAGE" "uid=$UID_IN_IMAGE" --entrypoint id "$TAG:$target"
done
RECIPES=(-v "$REPO/recipes:/recipes:ro")
NGRAM=/recipes/smollm2-135m-ngram-cpu.yaml
smoke "serve recipe validate" "smollm2-135m-ngram-cpu" "${RECIPES[@]}" "$TAG:serve" recipe validate "$NGRAM"
smoke "serve plan" "trtllm-spec/plan/v1" "${RECIPES[@]}" "$TAG:serve" plan --recipe "$NGRAM" --json
smoke "train plan" "trtllm-spec/plan/v1" "${RECIPES[@]}" "$TAG:train" plan --recipe "$NGRAM" --json

# writable host folders for uid 10001: the asset cache and the bundles
rm -rf "$WORK/out" "$WORK/results" "$WORK/train"
mkdir -p "$WORK/cache" "$WORK/out" "$WORK/results" "$WORK/train"
chown "$UID_IN_IMAGE:$UID_IN_IMAGE" "$WORK/cache" "$WORK/out" "$WORK/results" "$WORK/train"
CACHE=(-v "$WORK/cache:/cache")
smoke "train assets fetch smollm2-135m prompts" "prompts:" --network host "${CACHE[@]}" "${PIP_MOUNT[@]}" \
    "$TAG:train" assets fetch smollm2-135m prompts
BUNDLE_NAME=smollm2-135m-ngram-cpu
smoke "train build (n-gram, SmolLM2-135M)" "$BUNDLE_NAME" "${CACHE[@]}" "${RECIPES[@]}" -v "$WORK/out:/out" \
    "$TAG:train" build "$NGRAM" --out "/out/$BUNDLE_NAME"
BUNDLE_RO=(-v "$WORK/out/$BUNDLE_NAME:/bundle:ro")
smoke "serve verify (bundle read-only)" "/bundle: ok" "${BUNDLE_RO[@]}" "$TAG:serve" verify /bundle
smoke "serve serve.sh (fake trtllm-serve)" "FAKE trtllm-serve" "${BUNDLE_RO[@]}" "${CACHE[@]}" \
    --entrypoint /bundle/serve.sh "$TAG:serve"
fail_smoke "serve bench.sh into the read-only bundle" "BENCH_RESULTS" "${BUNDLE_RO[@]}" \
    --entrypoint /bundle/bench.sh "$TAG:serve"
smoke "serve bench.sh (fake trtllm-bench, BENCH_RESULTS=/results)" "FAKE trtllm-bench" "${BUNDLE_RO[@]}" \
    -v "$WORK/results:/results" -e BENCH_RESULTS=/results --entrypoint /bundle/bench.sh "$TAG:serve"

# a few training steps: EAGLE-3 on the cached SmolLM2-135M, over a small conversations file taken as written
# (data.regenerate: false; regeneration is the same target forward the n-gram build's measurement ran)
python3 - "$WORK/train" <<'EOF'
import json, sys
from pathlib import Path

work = Path(sys.argv[1])
topics = ["rivers", "prime numbers", "bread", "the moon", "sorting lists", "trains", "tea", "volcanoes"]
with open(work / "conversations.jsonl", "w") as f:
    for i in range(16):
        t = topics[i % len(topics)]
        msgs = [{"role": "user", "content": f"Tell me one short fact about {t}."},
                {"role": "assistant", "content": f"Here is a short fact about {t}: it is a topic people like to "
                                                 f"learn about, and there is always more to say about {t}."}]
        f.write(json.dumps({"id": f"c{i}", "messages": msgs}) + "\n")
recipe = {"name": "docker-check-train", "extends": "/recipes/base/cpu-smollm2.yaml",
          "drafter": {"type": "eagle3", "draft_vocab_size": 2048, "training": {
              "max_steps": 2, "batch_size": 2, "seq_len": 64, "precision": "fp32", "checkpoint_every": 2,
              "data": {"path": "/work/conversations.jsonl", "eval_fraction": 0.25, "regenerate": False}}}}
(work / "train.yaml").write_text(json.dumps(recipe, indent=1))
EOF
chown -R "$UID_IN_IMAGE:$UID_IN_IMAGE" "$WORK/train"
smoke "train train (EAGLE-3, 2 steps)" "drafter: /work/out" "${CACHE[@]}" "${RECIPES[@]}" -v "$WORK/train:/work" \
    "$TAG:train" train /work/train.yaml --out /work/out --max-steps 2 --device cpu

unlock
if [ "${KEEP_IMAGES:-1}" = 0 ]; then
    "$DOCKER" image rm "$TAG:wheel" "$TAG:serve" "$TAG:train" >/dev/null
fi
record "docker_check: all builds and smoke runs passed"

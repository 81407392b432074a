#!/usr/bin/env bash
# Install NVIDIA AIConfigurator (aiconfigurator 0.12.0 + aiconfigurator-core 0.12.0, PyPI, Apache-2.0, CPU only) into
# a venv of its own under the trtllm-spec cache, only when it is missing.   Usage: scripts/setup_aic.sh
#
# Optional: `plan` with planner.work: aiconfigurator prices the target's pass with its measured kernel tables
# (trtllm_spec/silicon/aic.py runs it in this venv; nothing of it is imported into .venv), and
# benchmarks/planner_vs_aic.py --record asks it. About 860 MB (pandas, scipy, pyarrow, plotly, bokeh and its 95 MB of
# kernel tables), so neither setup.sh nor the tests install it: tests/unit/test_silicon.py reads answers recorded
# from it (tests/fixtures/aic_answers.json) and checks them against it only where this venv exists.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
AVENV="${TRTLLM_SPEC_AIC_VENV:-${TRTLLM_SPEC_CACHE:-$HOME/.cache/trtllm-spec}/aic-venv}"
[ -x "$AVENV/bin/python" ] || "$PY" -m venv "$AVENV"
if ! "$AVENV/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("aiconfigurator") != "0.12.0")' \
        2>/dev/null; then
    "$AVENV/bin/python" -m pip install -q "aiconfigurator==0.12.0" "aiconfigurator-core==0.12.0"
fi
echo "AIConfigurator ($("$AVENV/bin/python" -c 'import importlib.metadata as m; print(m.version("aiconfigurator"))')) in $AVENV"

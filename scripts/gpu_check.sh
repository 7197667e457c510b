#!/usr/bin/env bash
# GPU check: install the CUDA build of the installed jax version, then, on whatever
# accelerator JAX sees, run the sharding and multi-process tests and the benchmark's
# quick mode, and print the benchmark's BENCH line last.
#
#   bash scripts/gpu_check.sh            # uses `python` (or $PYTHON)
#   SKIP_INSTALL=1 bash scripts/gpu_check.sh
#
# Exit code: that of the first failing step. The full log goes to $LOG (default
# gpu_check.log in the repository root).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
LOG=${LOG:-gpu_check.log}
: > "$LOG"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

if [ -z "${SKIP_INSTALL:-}" ]; then
    JAXV=$("$PY" -c "import jax; print(jax.__version__)")
    echo "installing jax[cuda12]==$JAXV" | tee -a "$LOG"
    "$PY" -m pip install -q "jax[cuda12]==$JAXV" >> "$LOG" 2>&1
fi
"$PY" - <<'PY' 2>&1 | tee -a "$LOG"
import jax
print("jax", jax.__version__, "backend", jax.default_backend(), "devices", jax.devices())
PY

# The device sharding and the two-process run (results bit for bit across device and process counts).
"$PY" -m pytest -q -n 0 -p no:randomly tests/test_sharding.py tests/test_multiprocess.py >> "$LOG" 2>&1 \
    && echo "sharding tests: passed" | tee -a "$LOG" \
    || { echo "sharding tests: FAILED (see $LOG)"; exit 1; }

# The benchmark, quick mode, on every device JAX sees (no CPU device split on a GPU).
"$PY" scripts/bench.py --one-device >> "$LOG" 2>&1 || { echo "bench: FAILED (see $LOG)"; exit 1; }
grep '^BENCH ' "$LOG" | tail -n 1

#!/usr/bin/env bash
# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# The collection's checks against a real NVIDIA driver (tests/gpu/README.md):
#   1. gpu_facts vs nvidia-smi's CSV on the idle GPUs (same GPUs, same PIDs, memory within 1%)
#   2. the idle baseline; 3. eight holders titled VLLM::Worker_TP<i> under one vLLM-like parent;
#   4. gpu_facts vs nvidia-smi again, with the holders listed; 5. gpu_reclaim, and the memory back at the baseline.
# It only queries the GPU: never a reset or a setting (nvidia-smi is called through an allowlist of query flags),
# kills only the PIDs it started (by recorded PID and start time), and stops itself after $GPU_CHECKS_TIMEOUT_S.
#
# usage: tests/gpu/run_gpu_checks.sh [--simulated] [--no-cuda] [--direct] [--workers N] [--mib MIB]
#   --simulated  run on the repository's simulated GPU host (fake NVML and nvidia-smi; holders are allocation records)
#   --no-cuda    holders allocate nothing (checks the processes and titles; the reclaim memory check is skipped)
#   --direct     call the module_utils even when ansible-core is installed
# Output goes to stdout and, when OUT is set, to $OUT/ (log and every artefact).
# Exit 0: every step passed; 1: a step failed; 3: a step refused to run (e.g. every GPU busy with other processes).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

if [[ -z "${GPU_CHECKS_UNDER_TIMEOUT:-}" ]]; then
    export GPU_CHECKS_UNDER_TIMEOUT=1
    # the hard limit: TERM to this script (its trap ends the running step and the holders), KILL 30 s later
    exec timeout --kill-after=30 "${GPU_CHECKS_TIMEOUT_S:-420}" bash "${BASH_SOURCE[0]}" "$@"
fi

SIMULATED=0 MODE=cuda DIRECT=() WORKERS=8 MIB=3072
while (($#)); do
    case $1 in
        --simulated) SIMULATED=1 ;;
        --no-cuda) MODE=none ;;
        --direct) DIRECT=(--direct) ;;
        --workers) WORKERS=$2; shift ;;
        --mib) MIB=$2; shift ;;
        -h | --help) sed -n '3,18p' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) echo "run_gpu_checks.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done

WORK=$(mktemp -d -t gpuops-gpu-checks.XXXXXX)
# the checks import the collection as ansible_collections.gpuops.fleet from $WORK/collections (gpucheck_common.Modules
# links this checkout there); the folder exists before Python starts, so that its path entry is searched
mkdir -p "$WORK/collections"
export PYTHONPATH=$WORK/collections${PYTHONPATH:+:$PYTHONPATH}
if [[ -n "${OUT:-}" ]]; then
    mkdir -p "$OUT"
    exec > >(tee -a "$OUT/run_gpu_checks.log") 2>&1
fi

PY=${PYTHON:-python3}
declare -a RESULTS=()
STEP_PID=

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [[ -d $WORK/holders ]]; then
        "$PY" "$HERE/cuda_holders.py" cleanup --dir "$WORK/holders" || rc=1
        [[ -z "${OUT:-}" ]] || cp "$WORK"/holders/*.log "$OUT"/ 2>/dev/null || true
    fi
    if ((SIMULATED)) && [[ -n "${GPUOPS_SIM_STATE:-}" ]]; then
        PYTHONPATH="$REPO/simulator" "$PY" -m gpusim cleanup --state "$GPUOPS_SIM_STATE" --remove >/dev/null || rc=1
    fi
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
on_signal() {
    echo "run_gpu_checks.sh: stopped by SIG$1 (the hard timeout is ${GPU_CHECKS_TIMEOUT_S:-420} s); steps done:"
    printf '%s\n' "${RESULTS[@]}"
    if [[ -n $STEP_PID ]]; then
        kill -TERM "$STEP_PID" 2>/dev/null || true
        wait "$STEP_PID" 2>/dev/null || true
    fi
    exit "$2"
}
trap 'on_signal TERM 124' TERM
trap 'on_signal INT 130' INT

# step NAME TIMEOUT_S COMMAND...: run one check; record PASS / FAIL / SKIP (exit 3: refused to run).
# The step runs in the background so that a signal to this script is handled at once (not after the step).
step() {
    local name=$1 limit=$2 rc=0
    shift 2
    echo
    echo "=== $name"
    timeout --kill-after=10 "$limit" "$@" &
    STEP_PID=$!
    wait "$STEP_PID" || rc=$?
    STEP_PID=
    case $rc in
        0) RESULTS+=("PASS  $name") ;;
        3) RESULTS+=("SKIP  $name (refused: see above)") ;;
        124) RESULTS+=("FAIL  $name (timed out after $limit s)") ;;
        *) RESULTS+=("FAIL  $name (exit $rc)") ;;
    esac
    return "$rc"
}

if ((SIMULATED)); then
    [[ -x $REPO/simulator/build/bin/nvidia-smi ]] || make -C "$REPO/simulator/nvml" >/dev/null
    [[ -n "${PYTHON:-}" || ! -x $REPO/.venv/bin/python ]] || PY=$REPO/.venv/bin/python
    [[ $MODE == none ]] || MODE=sim
    export GPUOPS_SIM_STATE=$WORK/simhost
    export LD_LIBRARY_PATH=$REPO/simulator/build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export PATH=$REPO/simulator/build/bin:$PATH
    export PYTHONPATH=$REPO/simulator${PYTHONPATH:+:$PYTHONPATH}
    "$PY" -m gpusim create --state "$GPUOPS_SIM_STATE" --gpus "${SIM_GPUS:-2}"
fi
WHEELS=${GPU_CHECKS_WHEELS:-$HERE/wheels}
if compgen -G "$WHEELS/*.whl" >/dev/null; then
    # ansible-core from wheels brought along (no network); torch, nvidia-ml-py and psutil from $PY's own site-packages
    if "$PY" -m venv --system-site-packages "$WORK/venv" &&
        "$WORK/venv/bin/python" -m pip install -q --no-index --find-links "$WHEELS" ansible-core; then
        PY=$WORK/venv/bin/python
    else
        echo "== could not install ansible-core from $WHEELS: the modules run through their module_utils"
    fi
fi

echo "== gpuops.fleet GPU checks: $(date -u +%FT%TZ) on $(hostname), python $("$PY" -c 'import sys; print(sys.version.split()[0])')"
echo "== mode: $( ((SIMULATED)) && echo simulated host || echo real driver ), holders: $MODE, work dir: $WORK"
cd "$HERE"
"$PY" - <<'EOF' || true
from gpucheck_common import nvidia_smi
for row in nvidia_smi("--query-gpu=index,name,driver_version,memory.total,memory.used", "--format=csv,noheader"):
    print("   GPU " + ", ".join(row))
EOF

step "gpu_facts vs nvidia-smi, idle" 120 "$PY" check_facts.py --work "$WORK" --label idle "${DIRECT[@]}" || true
if step "idle baseline" 120 "$PY" check_reclaim.py baseline --work "$WORK" --workers "$WORKERS" --mib "$MIB" "${DIRECT[@]}"; then
    # shellcheck source=/dev/null  # written by check_reclaim.py baseline
    source "$WORK/baseline.env"
    if step "start $WORKERS holders ($MODE)" 240 "$PY" cuda_holders.py start --dir "$WORK/holders" --gpus "$WORKER_GPUS" --mib "$WORKER_MIB" --mode "$MODE"; then
        step "gpu_facts vs nvidia-smi, with the holders" 120 "$PY" check_facts.py --work "$WORK" --label holders --holders "$WORK/holders" "${DIRECT[@]}" || true
        step "gpu_reclaim and the memory back at the baseline" 150 "$PY" check_reclaim.py run --work "$WORK" --holders "$WORK/holders" "${DIRECT[@]}" || true
    fi
fi

echo
echo "=== summary"
printf '%s\n' "${RESULTS[@]}" | tee "$WORK/summary.txt"
[[ -z "${OUT:-}" ]] || cp "$WORK"/*.json "$WORK"/*.csv "$WORK"/*.txt "$OUT"/ 2>/dev/null || true
if grep -q '^FAIL' "$WORK/summary.txt"; then
    exit 1
elif grep -q '^SKIP' "$WORK/summary.txt"; then
    exit 3
fi

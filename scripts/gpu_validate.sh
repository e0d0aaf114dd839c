#!/usr/bin/env bash
# kvcalc validation on the GPU host (one H200): real transformers and vLLM beside kvcalc's predictions.
#
# One command (the GPU host's set-up script, device_setup.sh from the .gpu-bundle the session's device tool carries,
# is not part of this repository; it installs vLLM/torch and sets KVCALC_READY=1):
#   source .gpu-bundle/device_setup.sh .gpu-bundle; [ "$KVCALC_READY" = 1 ] || exit 3; bash scripts/gpu_validate.sh
# Arguments:  [all|hf|vllm] [quick]
#   all   (default) the transformers matrix (first ~190 s), then the vLLM matrix, ~8 min in all
#   hf    the transformers matrix alone, with the whole budget (Llama-3.2-3B and 3.1-8B shapes, random weights;
#         bf16 weights with kv auto / hqq-4 / hqq-2 / quanto-4 at batch 1 and 8; NF4 weights with kv auto;
#         prompt 1024 + 256 new tokens)
#   vllm  the vLLM matrix alone (same shapes; kv auto / fp8; enforce_eager on / off; util 0.9 / 0.85;
#         max_model_len 8192; decode speed at batch 1 and 32)
#   quick a small matrix (< 5 min)
# Cases run in priority order; the ones the budget (KVCALC_BUDGET_S, default 480 s) does not reach get a 'skipped'
# row, so running `hf` and `vllm` as two commands covers everything.
#
# Results in $OUT (at most 6 files): env.json, hf.jsonl, vllm.jsonl, logs.tar.gz (one vLLM log per case, the worker
# consoles, the transformers console), summary.txt, console.txt.
set -uo pipefail
MODE=${1:-all}
QUICK=${2:-}
cd "$(dirname "$0")/.."
if [ "${KVCALC_READY:-0}" != 1 ]; then
  echo "warning: KVCALC_READY is not 1: source .gpu-bundle/device_setup.sh .gpu-bundle first on the GPU host" >&2
fi
OUT=${OUT:-$PWD/validation-out}
mkdir -p "$OUT"
# The repository itself, without `pip install -e .` (offline host).
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_USE_FLASHINFER_SAMPLER=0 TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
BUDGET=${KVCALC_BUDGET_S:-480}

{
  echo "kvcalc gpu_validate: mode=$MODE ${QUICK:+quick} budget=${BUDGET}s out=$OUT"
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader 2>/dev/null || true
  # What kvcalc's core needs here (pydantic, pyyaml, numpy; click/rich only for the kvcalc CLI, not this run).
  $PY - <<'EOF'
import importlib
for name in ("torch", "transformers", "vllm", "hqq", "optimum.quanto", "bitsandbytes", "pydantic", "yaml", "numpy",
             "click", "rich"):
    try:
        mod = importlib.import_module(name) if name not in ("torch", "vllm", "transformers") else None
        if mod is None:
            from importlib import metadata
            print(f"  {name}: {metadata.version(name)}")
        else:
            print(f"  {name}: {getattr(mod, '__version__', 'present')}")
    except Exception as exc:  # noqa: BLE001
        print(f"  {name}: MISSING ({type(exc).__name__}: {exc})")
EOF
} 2>&1 | tee "$OUT/console.txt"

ARGS=(--out "$OUT" --budget-s "$BUDGET" --hf-budget-s "${KVCALC_HF_BUDGET_S:-190}")
case "$MODE" in
  all) ARGS+=(--hf --vllm) ;;
  hf) ARGS+=(--hf) ;;
  vllm) ARGS+=(--vllm) ;;
  *) echo "usage: bash scripts/gpu_validate.sh [all|hf|vllm] [quick]" >&2; exit 2 ;;
esac
[ "$QUICK" = quick ] && ARGS+=(--quick)
[ -n "${KVCALC_VLLM_PER_PROCESS:-}" ] && ARGS+=(--per-process "$KVCALC_VLLM_PER_PROCESS")
# KVCALC_RESUME=1: skip cases that already have a row in $OUT (after an interrupted run)
[ "${KVCALC_RESUME:-0}" = 1 ] && ARGS+=(--resume)

$PY -m kvcalc.validate.matrix "${ARGS[@]}" 2>&1 | tee -a "$OUT/console.txt"
rc=${PIPESTATUS[0]}
ls -l "$OUT"
exit "$rc"

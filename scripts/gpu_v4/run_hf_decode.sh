#!/usr/bin/env bash
# Issue 18 item 4: transformers decode at batch 1 and 8, default and quantized caches, three shapes (H200, one GPU).
# Command (device tool, kind nvidia-h200, carry .gpu-bundle, timeout 600):
#   source .gpu-bundle/device_setup.sh .gpu-bundle; [ "$KVCALC_READY" = 1 ] || exit 3; bash scripts/gpu_v4/run_hf_decode.sh
# Writes $OUT/hf_decode.jsonl (one row per case, appended as each ends) and $OUT/hf_decode.console.
set -uo pipefail
# shellcheck source=scripts/gpu_env.sh
source "$(dirname "$0")/../gpu_env.sh"
DEADLINE=$(( $(date +%s) + ${KVCALC_BUDGET_S:-530} ))
python3 scripts/gpu_v4/hf_decode.py --out "$OUT/hf_decode.jsonl" --deadline "$DEADLINE" "$@" > "$OUT/hf_decode.console" 2>&1
tail -n 30 "$OUT/hf_decode.console"

#!/usr/bin/env bash
# Issue 18 item 4: transformers decode, interleaved rounds with a host probe (H200, one GPU). One part per command:
#   source .gpu-bundle/device_setup.sh .gpu-bundle; [ "$KVCALC_READY" = 1 ] || exit 3; bash scripts/gpu_v5/run_hf_decode_interleaved.sh a
# (device tool, kind nvidia-h200, carry .gpu-bundle, timeout 600; then part b). Writes $OUT/hf_interleaved.jsonl (one
# row per case and round, appended as each ends) and $OUT/hf_interleaved.console.
set -uo pipefail
PART="${1:?part: a or b (scripts/gpu_v5/hf_decode_interleaved_cases.json)}"
# shellcheck source=scripts/gpu_env.sh
source "$(dirname "$0")/../gpu_env.sh"
DEADLINE=$(( $(date +%s) + ${KVCALC_BUDGET_S:-530} ))
python3 scripts/gpu_v5/hf_decode_interleaved.py --part "$PART" --out "$OUT/hf_interleaved.jsonl" --deadline "$DEADLINE" \
  > "$OUT/hf_interleaved.console" 2>&1
tail -n 30 "$OUT/hf_interleaved.console"

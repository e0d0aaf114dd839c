#!/usr/bin/env bash
# Tensor parallel 2 with real vLLM on the two-GPU H200 machine (nvidia-h200-x2): scripts/gpu_cases/tp2.json,
# one fresh process per case. NVLink multicast stays off (the device documentation requires it).
# Command (device tool, kind nvidia-h200-x2, carry .gpu-bundle):
#   source .gpu-bundle/device_setup.sh .gpu-bundle; [ "$KVCALC_READY" = 1 ] || exit 3; bash scripts/gpu_run_tp2.sh
set -uo pipefail
# shellcheck source=scripts/gpu_env.sh
source "$(dirname "$0")/gpu_env.sh"
R=/tmp/kvcalc-tp2; rm -rf $R; mkdir -p $R
nvidia-smi topo -m > $R/topo.txt 2>&1
python3 -m kvcalc.validate.vllm_runner --cases-file scripts/gpu_cases/tp2.json --out $R/vllm-tp2.jsonl \
  --log-dir $R/vllm-logs --per-process 1 --budget-s ${KVCALC_BUDGET_S:-420} > $R/tp2.console 2>&1
tar czf $OUT/results-tp2.tar.gz -C /tmp kvcalc-tp2
cp $R/vllm-tp2.jsonl $OUT/
tail -n 30 $R/tp2.console

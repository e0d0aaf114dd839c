#!/usr/bin/env bash
# Held-out speed and transformers cases, on the two-GPU H200 machine (nvidia-h200-x2), both GPUs at once:
#   GPU 0: scripts/gpu_cases/holdout_speed_gpu0.json (vLLM, CUDA graphs, decode at batch 1 and 32)
#   GPU 1: scripts/gpu_cases/holdout_hf_gpu1.json (transformers, Llama-3.1-8B shape)
# Command (device tool, carry .gpu-bundle):
#   source .gpu-bundle/device_setup.sh .gpu-bundle; [ "$KVCALC_READY" = 1 ] || exit 3; bash scripts/gpu_run_holdout.sh
set -uo pipefail
# shellcheck source=scripts/gpu_env.sh
source "$(dirname "$0")/gpu_env.sh"
R=/tmp/kvcalc-holdout; rm -rf $R; mkdir -p $R
BUDGET=${KVCALC_BUDGET_S:-330}
(CUDA_VISIBLE_DEVICES=0 python3 -m kvcalc.validate.vllm_runner --cases-file scripts/gpu_cases/holdout_speed_gpu0.json \
   --out $R/vllm-holdout.jsonl --log-dir $R/vllm-logs --per-process 1 --budget-s $BUDGET > $R/gpu0.console 2>&1) &
(CUDA_VISIBLE_DEVICES=1 python3 -m kvcalc.validate.hf_runner --cases-file scripts/gpu_cases/holdout_hf_gpu1.json \
   --out $R/hf-holdout.jsonl --budget-s $BUDGET > $R/gpu1.console 2>&1) &
wait
tar czf $OUT/logs-holdout.tar.gz -C /tmp kvcalc-holdout
cp $R/*.jsonl $OUT/
for f in $R/*.console; do echo "== $f"; tail -n 4 "$f"; done

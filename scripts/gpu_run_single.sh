#!/usr/bin/env bash
# The single-GPU validation run, on the two-GPU H200 machine (nvidia-h200-x2), both GPUs busy at once:
#   GPU 0: vLLM cases of scripts/gpu_cases/single_gpu0.json, one fresh process each (as a user's start-up is)
#   GPU 1: the transformers matrix (Llama-3.2-3B and 3.1-8B shapes), then scripts/gpu_cases/single_gpu1.json
# Command (device tool, carry .gpu-bundle):
#   source .gpu-bundle/device_setup.sh .gpu-bundle; [ "$KVCALC_READY" = 1 ] || exit 3; bash scripts/gpu_run_single.sh
set -uo pipefail
# shellcheck source=scripts/gpu_env.sh
source "$(dirname "$0")/gpu_env.sh"
R=/tmp/kvcalc-results; rm -rf $R; mkdir -p $R
BUDGET=${KVCALC_BUDGET_S:-500}
python3 scripts/gpu_probe.py $R/probe.json > /dev/null 2>&1
nvidia-smi > $R/nvidia-smi.txt 2>&1
(CUDA_VISIBLE_DEVICES=0 python3 -m kvcalc.validate.vllm_runner --cases-file scripts/gpu_cases/single_gpu0.json \
   --out $R/vllm-gpu0.jsonl --log-dir $R/vllm-logs --per-process 1 --budget-s $BUDGET > $R/gpu0.console 2>&1) &
(export CUDA_VISIBLE_DEVICES=1
 python3 -m kvcalc.validate.matrix --out $R/hf --hf --budget-s 250 --hf-budget-s 250 > $R/gpu1-hf.console 2>&1
 python3 -m kvcalc.validate.hf_runner --cases-file scripts/gpu_cases/hf_gemma.json --out $R/hf-gemma.jsonl \
   --budget-s 60 > $R/gpu1-hf-gemma.console 2>&1
 python3 -m kvcalc.validate.vllm_runner --cases-file scripts/gpu_cases/single_gpu1.json --out $R/vllm-gpu1.jsonl \
   --log-dir $R/vllm-logs --per-process 1 --budget-s $((BUDGET - 330)) > $R/gpu1-vllm.console 2>&1) &
wait
tar czf $OUT/results.tar.gz -C /tmp kvcalc-results
cp $R/vllm-gpu0.jsonl $R/vllm-gpu1.jsonl $R/probe.json $OUT/ 2>/dev/null; cp $R/hf/hf.jsonl $OUT/hf.jsonl 2>/dev/null; cp $R/hf-gemma.jsonl $OUT/ 2>/dev/null
for f in $R/*.console; do echo "== $f"; tail -n 5 "$f"; done

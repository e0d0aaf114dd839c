#!/usr/bin/env bash
# One device call: both per-GPU case queues in parallel (GPU 0: cases_gpu0.json, GPU 1: cases_gpu1.json; on a
# one-GPU host the two queues run one after the other), each stopping new cases BUDGET_S seconds after the start.
# Rows accumulate in /tmp/kvobs on the host, so a later call on the same warm host skips what is already observed
# (and runs the MoE cases once the MoE kernels were added). Everything is copied to $OUT as it comes in.
#
#   bash .gpu-work/run_call.sh TAG BUDGET_S [hf|-] [SET]     (SET: queue files cases_gpuN${SET}.json, e.g. _c4)
#
# Started from the device tool after `source .gpu-bundle/device_setup.sh .gpu-bundle` (or .gpu-moe), with
# .gpu-work (this folder, copied from scripts/gpu_v2/) carried along.
set -uo pipefail
W=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TAG=${1:?tag}; BUDGET=${2:?budget seconds}; HF=${3:-}; SET=${4:-}
[ "$HF" = "-" ] && HF=
export VLLM_ENABLE_V1_MULTIPROCESSING=0 PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=/tmp/kvobs; mkdir -p $R/logs
START=$(date +%s); DEADLINE=$(( START + BUDGET ))
echo "call $TAG start $(date -u +%FT%TZ) budget ${BUDGET}s; moe kernels: $(ls ${KVCALC_SITE:-/tmp/kvcalc/site}/vllm/_moe_C* 2>/dev/null | wc -l)"
nvidia-smi > $R/nvidia-smi-$TAG.txt 2>&1
NG=$(nvidia-smi -L 2>/dev/null | wc -l)
copy_out() {
  for f in gpu0$SET gpu1$SET; do [ -f $R/$f.jsonl ] && cp $R/$f.jsonl $OUT/vllm-$f.jsonl; done
  [ -f $R/hf.jsonl ] && cp $R/hf.jsonl $OUT/hf.jsonl
  return 0
}
( while sleep 15; do copy_out; done ) & COPIER=$!
q() {  # q GPU_INDEX QUEUE_INDEX
  CUDA_VISIBLE_DEVICES=$1 python3 $W/vllm_obs.py --cases $W/cases_gpu$2$SET.json --configs $W/configs \
    --out $R/gpu$2$SET.jsonl --log-dir $R/logs --tag $TAG-g$2 --deadline $DEADLINE 2>&1 | tee -a $R/parent-$TAG-g$2.txt
}
if [ "$NG" -ge 2 ]; then
  q 0 0 & P0=$!
  ( q 1 1
    if [ -n "$HF" ] && [ $(( DEADLINE - $(date +%s) )) -gt 60 ]; then
      CUDA_VISIBLE_DEVICES=1 python3 $W/hf_obs.py --out $R/hf.jsonl --deadline $DEADLINE 2>&1 | tee -a $R/hf-$TAG.txt
    fi ) & P1=$!
  wait $P0 $P1
else
  q 0 0; q 0 1
fi
kill $COPIER 2>/dev/null
copy_out
tar czf $OUT/logs-$TAG.tar.gz -C $R logs $(cd $R && ls parent-*.txt hf-*.txt nvidia-smi-*.txt 2>/dev/null)
echo "call $TAG end $(date -u +%FT%TZ) after $(( $(date +%s) - START )) s"
for f in $R/gpu0$SET.jsonl $R/gpu1$SET.jsonl $R/hf.jsonl; do
  [ -f $f ] && python3 -c "
import json,sys
for l in open('$f'):
    r=json.loads(l); i=(r.get('observed') or {}).get('internals') or {}
    print(r.get('tag'), r.get('case_id'), r.get('status'), i.get('num_gpu_blocks'), i.get('kv_cache_size_tokens'), (r.get('message') or '')[:160])
"
done
exit 0

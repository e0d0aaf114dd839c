#!/usr/bin/env bash
# Issue 22 item 5: where CUDA-graph capture after the KV cache runs out of memory on vLLM 0.26's V2 model runner
# (the /metrics side of the issue is covered by issue 25's captures in docs/validation/data/v4/serve/).
#
# Three servers of Llama-3.1-8B's shape (random weights, a word-level tokenizer), one after the other, on one H200:
#   a  util 0.90, max-model-len 8192, CUDA graphs (control: the graph size it logs)  -> $OUT/metrics-a.txt
#   c  util 0.99  (kvcalc: graphs fit after the KV cache, margin +0.60 GiB)   -> starts or not, log kept
#   d  util 0.995 (kvcalc: graph capture short by 0.10 GiB: "starts, then fails at graph capture") -> likewise
# Each server's log goes to $OUT/server-X.log; $OUT/summary.json says which started, the cache_config_info line, and
# the start-up lines kvcalc compares (KV cache memory, GPU KV cache size, graph capture). Run from the repo root:
#
#   source .gpu-bundle/device_setup.sh .gpu-bundle; [ "$KVCALC_READY" = 1 ] || exit 3; bash scripts/gpu_v4/metrics_capture.sh
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
OUT=${OUT:?set by the device tool}
M=/tmp/m-llama8b; mkdir -p $M
python3 - <<'PY'
import json
cfg = json.load(open("scripts/gpu_v2/configs/llama-3.1-8b.json"))
cfg.pop("_source", None)
json.dump(cfg, open("/tmp/m-llama8b/config.json", "w"), indent=1)
# a word-level tokenizer of the config's vocabulary (as /work/shared/gpu/make_tokenizer.py): token i is "t<i>"
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
tok = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(cfg["vocab_size"])}, unk_token="t0"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", bos_token="t128000",
                        eos_token="t128001").save_pretrained("/tmp/m-llama8b")
PY
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv > $OUT/nvidia-smi.csv 2>&1
run() {  # run TAG UTIL EXTRA...
  local tag=$1 util=$2; shift 2
  python3 -m vllm.entrypoints.cli.main serve $M --load-format dummy --dtype bfloat16 --max-model-len 8192 \
      --gpu-memory-utilization $util --port 8011 --served-model-name m "$@" > $OUT/server-$tag.log 2>&1 &
  local pid=$! ok=0
  for _ in $(seq 1 90); do
    if curl -sf http://127.0.0.1:8011/health >/dev/null; then ok=1; break; fi
    kill -0 $pid 2>/dev/null || break
    sleep 2
  done
  if [ $ok = 1 ]; then
    curl -sf -X POST http://127.0.0.1:8011/v1/completions -H 'Content-Type: application/json' \
      -d '{"model":"m","prompt":"t5 t6 t7 t8","max_tokens":16,"ignore_eos":true}' > $OUT/completion-$tag.json || true
    curl -sf http://127.0.0.1:8011/metrics > $OUT/metrics-$tag.txt || true
  fi
  kill $pid 2>/dev/null; wait $pid 2>/dev/null
  echo "{\"tag\": \"$tag\", \"util\": $util, \"flags\": \"$*\", \"started\": $([ $ok = 1 ] && echo true || echo false)}" >> $OUT/runs.jsonl
  sleep 3
}
run a 0.90
run c 0.99
run d 0.995
python3 - <<'PY'
import json, os, re
out = os.environ["OUT"]
rows = [json.loads(l) for l in open(f"{out}/runs.jsonl")]
keys = ("Model loading took", "Available KV cache memory", "GPU KV cache size", "Maximum concurrency",
        "Graph capturing finished", "CUDA out of memory", "OutOfMemoryError", "Free memory on device")
for r in rows:
    log = open(f"{out}/server-{r['tag']}.log", errors="replace").read()
    r["log_lines"] = [l.strip()[-300:] for l in log.splitlines() if any(k in l for k in keys)][:20]
    path = f"{out}/metrics-{r['tag']}.txt"
    if os.path.exists(path):
        r["cache_config_info"] = [l for l in open(path) if l.startswith("vllm:cache_config_info")]
json.dump(rows, open(f"{out}/summary.json", "w"), indent=1)
for r in rows:
    print(r["tag"], r["util"], r["flags"], "started" if r["started"] else "FAILED", *r["log_lines"][-3:], sep="\n  ")
PY

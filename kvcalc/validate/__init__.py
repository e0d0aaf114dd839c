"""`kvcalc validate`: run real engines (transformers, vLLM) and put what they do beside what kvcalc predicts.

Nothing here imports torch, transformers or vLLM at module load: the runners import them inside functions, so the
log parser and the report work on a laptop without any of them.

- hf_runner.py: one transformers generate() case (random weights from a catalog config, or real GGUF weights) ->
  static / peak / cache bytes the objects really hold, decode speed, kvcalc's prediction and signed errors.
- vllm_runner.py: vLLM offline-engine cases, each in a child process (a crash or OOM is recorded and the rest run).
- predict.py: a case's or a log's settings -> engine settings -> kvcalc's estimate (runners, log, scripts share it).
- vllm_log.py: parse any vLLM 0.2x start-up log into bytes; compare with kvcalc.
- quality_runner.py: quality cost of KV and weight quantization on small real models (CPU); writes data/quality.json.
- results.py: JSONL rows (appended and flushed as they arrive), environment facts, release_gpu, pct.
- compare.py: signed relative errors, the table and the summary.
- matrix.py: the case matrices the GPU script runs (argparse entry, no click needed on the GPU host).
- cli.py: the `kvcalc validate` click command.
"""

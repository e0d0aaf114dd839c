"""The engines, each owning its own bytes.

weights.py (the static ledger), hf.py (transformers: cache bytes per layer, peak, max_context), vllm_specs.py (block
size, one page spec per layer), vllm_groups.py (page specs -> KV-cache groups -> KvLayout), vllm.py (the budget of
each pipeline stage -> the smallest -> one VllmEstimate).
"""

"""Engine accountings: how transformers (hf.py) and vLLM (vllm.py) spend GPU memory for the same model."""

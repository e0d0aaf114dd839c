# Sourced by the scripts/gpu_run_*.sh scripts: the repository on PYTHONPATH (the offline host has no pip install),
# vLLM in-process so its internals are readable, and NVLink multicast off (the device documentation requires it).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" VLLM_ENABLE_V1_MULTIPROCESSING=0 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

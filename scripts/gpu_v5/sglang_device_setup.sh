# Source at the start of every command on the GPU host, from the repo root:
#     source .gpu-sglang-a/sglang_device_setup.sh .gpu-sglang-a      (the folder this command carries)
# Works like ../shared/gpu/device_setup.sh, for a bundle in several parts (one part per command, since each command
# carries the tracked tree + at most 64 MiB): copies the part(s) found in the carried folder to /tmp/kvsg/parts (kept
# only while the host stays warm: ~30 s idle), and once every part listed in SHA256SUMS is there and the sums match,
# unpacks to /tmp/kvsg/site + /tmp/kvsg/jit. Then exports PYTHONPATH, TVM_FFI_CACHE_DIR (SGLang's prebuilt sm_90 JIT
# kernels) and the offline settings, and sets KVCALC_SGLANG_READY=1 (0: send the next part).
_src=${1:-.gpu-sglang-a}
_root=/tmp/kvsg
_stage=$_root/parts
KVCALC_SGLANG_SITE=$_root/site
mkdir -p "$_stage"
cp -f "$_src"/sgbundle.tar.xz.part* "$_src"/SHA256SUMS "$_stage"/ 2>/dev/null || true
KVCALC_SGLANG_READY=0
if [ -f "$KVCALC_SGLANG_SITE/.complete" ]; then
  KVCALC_SGLANG_READY=1
else
  _need=$(awk '{print $2}' "$_stage/SHA256SUMS" 2>/dev/null | wc -l)
  _have=$(cd "$_stage" && ls sgbundle.tar.xz.part* 2>/dev/null | wc -l)
  echo "sglang bundle: have $_have of $_need parts: $(cd "$_stage" && ls sgbundle.tar.xz.part* 2>/dev/null | tr '\n' ' ')"
  if [ "$_need" -gt 0 ] && [ "$_have" -eq "$_need" ] && (cd "$_stage" && sha256sum -c --quiet SHA256SUMS); then
    _t=$(date +%s)
    rm -rf "$KVCALC_SGLANG_SITE" "$_root/jit"
    # xz + tar when the image has them (multi-threaded, faster), else Python's tarfile
    if command -v xz >/dev/null && command -v tar >/dev/null; then
      cat "$_stage"/sgbundle.tar.xz.part* | xz -dc -T0 | tar -xf - -C "$_root"
    else
      cat "$_stage"/sgbundle.tar.xz.part* | python3 -c "import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode='r|xz').extractall('$_root', filter='fully_trusted')"
    fi && [ -f "$KVCALC_SGLANG_SITE/sglang/launch_server.py" ] && touch "$KVCALC_SGLANG_SITE/.complete" && KVCALC_SGLANG_READY=1
    echo "sglang bundle: unpacked in $(( $(date +%s) - _t )) s (ready=$KVCALC_SGLANG_READY)"
  elif [ "$_need" -gt 0 ] && [ "$_have" -eq "$_need" ]; then
    echo "sglang bundle: SHA256 mismatch:"; (cd "$_stage" && sha256sum -c SHA256SUMS 2>&1 | grep -v ': OK$')
  fi
fi
export PYTHONPATH="$KVCALC_SGLANG_SITE${PYTHONPATH:+:$PYTHONPATH}"
# the bundle's scripts (ipython, ...) are not needed; its JIT kernels are: SGLang loads
# $TVM_FFI_CACHE_DIR/<module>__arch_9.0__tvmffi_0.1.9/<module>.so without compiling (jit_kernel/utils.py load_jit)
export TVM_FFI_CACHE_DIR=$_root/jit CUDA_MODULE_LOADING=LAZY
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 DO_NOT_TRACK=1 PYTHONUNBUFFERED=1 SGLANG_DISABLE_REQUEST_LOGGING=1
# one GPU here, but keep NVLink multicast off as KINDS.md asks for every NCCL program
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export KVCALC_SGLANG_READY KVCALC_SGLANG_SITE

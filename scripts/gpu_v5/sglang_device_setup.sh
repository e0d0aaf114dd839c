# Source at the start of every command on the GPU host, from the repo root:
#     source .sg-bundle/sglang_device_setup.sh [BUNDLE_DIR]      (default: .sg-bundle)
# Works like ../shared/gpu/device_setup.sh: copies the part(s) sent with this command to /tmp/sg-parts (kept only
# while the host stays warm), unpacks to /tmp/sg once every part in SHA256SUMS is there, and exports PYTHONPATH,
# TVM_FFI_CACHE_DIR (the prebuilt JIT kernels) and the offline settings. KVCALC_SG_READY=1 once importable.
_src=${1:-.sg-bundle}
_stage=/tmp/sg-parts
KVCALC_SG_SITE=/tmp/sg/site
mkdir -p "$_stage" /tmp/sg
cp -f "$_src"/sgbundle.tar.xz.part* "$_src"/SHA256SUMS "$_stage"/ 2>/dev/null || true
KVCALC_SG_READY=0
if [ -f "$KVCALC_SG_SITE/.complete" ]; then
  KVCALC_SG_READY=1
else
  _need=$(awk '{print $2}' "$_stage/SHA256SUMS" 2>/dev/null | wc -l)
  _have=$(cd "$_stage" && ls sgbundle.tar.xz.part* 2>/dev/null | wc -l)
  echo "sglang bundle: have $_have of $_need parts"
  if [ "$_need" -gt 0 ] && [ "$_have" -eq "$_need" ] && (cd "$_stage" && sha256sum -c --quiet SHA256SUMS); then
    _t=$(date +%s)
    cat "$_stage"/sgbundle.tar.xz.part* | python3 -c "import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode='r|xz').extractall('/tmp/sg', filter='fully_trusted')" \
      && touch "$KVCALC_SG_SITE/.complete" && KVCALC_SG_READY=1
    echo "sglang bundle: unpacked in $(( $(date +%s) - _t )) s"
  fi
fi
export PYTHONPATH="$KVCALC_SG_SITE${PYTHONPATH:+:$PYTHONPATH}"
export TVM_FFI_CACHE_DIR=/tmp/sg/jit CUDA_MODULE_LOADING=LAZY
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 DO_NOT_TRACK=1 PYTHONUNBUFFERED=1 SGLANG_DISABLE_REQUEST_LOGGING=1
export KVCALC_SG_READY KVCALC_SG_SITE

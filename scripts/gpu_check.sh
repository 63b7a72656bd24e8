#!/usr/bin/env bash
# The one script a lent GPU session runs. Each section checks one thing on the device and prints
# what it measured; later issues add sections. Without CUDA every CUDA section says it is skipped,
# so the script can be tried on any machine. Files (JSON, SVG) go to $OUT when set (the device
# machine's return folder), else to a fresh temporary folder named at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
out="${OUT:-$(mktemp -d)}"
mkdir -p "$out"

section() { printf '\n=== %s ===\n' "$1"; }
has_cuda() { python -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; }
skip() { echo "skipped: $1"; }
# A failing section is reported and the script goes on: one device run shows every failure.
failed=()
try() { "$@" || { echo "FAILED (exit $?): $*"; failed+=("$*"); }; }

section "environment"
python - <<'PY'
import platform

import torch

print(f"python {platform.python_version()}, torch {torch.__version__}, CUDA build {torch.version.cuda}")
if torch.cuda.is_available():
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        print(f"cuda:{index} {props.name}, {props.total_memory / 2**30:.1f} GiB")
else:
    print("no CUDA device: the CUDA sections below are skipped")
PY

section "bench workload on CUDA: pooled blocks against a fresh tensor per request (llama-2-7b, all 32 layers)"
# 8 MiB blocks; the planned pool is 3072 blocks (24 GiB) and so is the per-request path's cap,
# enforced by the caching allocator (real OutOfMemoryErrors). The burst wants about twice the pool.
if has_cuda; then
  try python -m kvstress bench workload --device cuda --model llama-2-7b --layers 32 \
    --requests 400 --concurrency 16 --max-tokens 2048 --hold-ms 50 --burst 256 --policy queue \
    --json "$out/workload-cuda.json" --plot "$out/workload-cuda.svg"
else
  skip "no CUDA device (torch.cuda.is_available() is False)"
fi

section "CUDA tests: reset on the pool's stream, takers wait on its event, a planted no-wait caught"
if has_cuda; then
  try python -m pytest -q -p no:cacheprovider -m cuda tests
else
  skip "no CUDA device (torch.cuda.is_available() is False)"
fi

section "acquire_many/release_many on CUDA: one reset launch per batch, the taker's stream waits on its event"
# Also in the CUDA tests above; run alone here so its verdict is one line in the log.
if has_cuda; then
  try python -m pytest -q -p no:cacheprovider -m cuda tests/test_cuda_streams.py -k "acquire_many or batch"
else
  skip "no CUDA device (torch.cuda.is_available() is False)"
fi

section "pool benchmarks on CUDA: pairs/s against the seed-style pool (acquire_many rows included), reset bandwidth against copy"
if has_cuda; then
  try python benchmarks/bench_pool.py --device cuda
else
  skip "no CUDA device (torch.cuda.is_available() is False)"
fi

section "pool benchmarks on the CPU (the same table, for comparison)"
try python benchmarks/bench_pool.py

section "done"
echo "files in $out"
if ((${#failed[@]})); then
  printf 'failed sections: %d\n' "${#failed[@]}"
  exit 1
fi

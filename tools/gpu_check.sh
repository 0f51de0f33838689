#!/usr/bin/env bash
# Builds mpsgraph with its CUDA backend on a GPU machine and runs the CUDA tests and the
# conformance table on cuda:0, in one command (each lent machine starts bare):
#
#   OUT=/some/dir tools/gpu_check.sh [pytest -k expression]
#
# Needs the scipy-openblas32 wheel in .whl/ (the machine has no network; see CONTRIBUTING.md /
# the GPU recipe). Writes build.log, env.txt, cuda.log, conformance.log and summary.txt to $OUT.
# MPSGRAPH_PREBUILT=path/_core....so uses an extension built elsewhere (for this machine's
# Python, with MPSGRAPH_CUDA=ON) instead of building here.
set -uo pipefail
OUT=${OUT:-/tmp/mg-gpu}
mkdir -p "$OUT"
SITE=${SITE:-/tmp/mg-site}
rm -rf "$SITE"  # pip --target does not replace a package already there: a warm machine kept the old build
export CUDACXX=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
export MPSGRAPH_CACHE_DIR=${MPSGRAPH_CACHE_DIR:-/tmp/mg-cache}
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  nvcc --version 2>&1 | tail -1
  ls /usr/local/cuda/lib64 2>/dev/null | grep -E "nvrtc|cublasLt" | head
  python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)" 2>&1
} > "$OUT/env.txt"
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target "$SITE" .whl/*.whl > "$OUT/build.log" 2>&1
fi
t0=$(date +%s)
if [ -n "${MPSGRAPH_PREBUILT:-}" ]; then
  mkdir -p "$SITE" && cp -r python/mpsgraph "$SITE/" && cp "$MPSGRAPH_PREBUILT" "$SITE/mpsgraph/" \
    || { echo "no extension at $MPSGRAPH_PREBUILT"; exit 1; }
  echo "prebuilt: $MPSGRAPH_PREBUILT" >> "$OUT/env.txt"
else
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) PYTHONPATH=$SITE python3 -m pip install -v --no-build-isolation --no-deps \
    --target "$SITE" . -Ccmake.define.MPSGRAPH_LTO=OFF -Ccmake.define.MPSGRAPH_CUDA=ON >> "$OUT/build.log" 2>&1 \
    || { echo "build failed"; tail -50 "$OUT/build.log"; exit 1; }
fi
echo "build: $(( $(date +%s) - t0 )) s" >> "$OUT/env.txt"
export PYTHONPATH=$SITE
python3 -c "import mpsgraph as mg; print(mg.devices(), repr(mg.cuda().description), repr(mg.cuda().unavailable_reason))" \
  >> "$OUT/env.txt" 2>&1
K=${1:-cuda}
python3 -m pytest -q -p no:cacheprovider -n 8 -rs tests/test_cuda*.py tests/test_channels_last.py tests/test_fusion_isa.py > "$OUT/cuda.log" 2>&1
python3 -m pytest -q -p no:cacheprovider -n 8 -rx tests/test_conformance.py -k "$K" > "$OUT/conformance.log" 2>&1
{
  echo "== test_cuda"; tail -3 "$OUT/cuda.log"
  echo "== conformance on cuda"; tail -1 "$OUT/conformance.log"
} > "$OUT/summary.txt"
cat "$OUT/env.txt" "$OUT/summary.txt"

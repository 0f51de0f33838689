#!/usr/bin/env bash
# Builds mpsgraph with its CUDA backend on a GPU machine (incrementally, in build/gpu, so a warm
# machine rebuilds only what changed), runs the convolution/pooling GPU tests and the GPU
# benchmarks (benchmarks/gpu.py), in one command:
#
#   OUT=/some/dir tools/gpu_bench.sh [benchmarks/gpu.py arguments]
#
# Needs the scipy-openblas32 wheel in .whl/ (no network there). Writes build.log, conv.log,
# conformance.log, bench.log and bench.json to $OUT; MPSGRAPH_SKIP_TESTS=1 runs the benchmarks only.
set -uo pipefail
OUT=${OUT:-/tmp/mg-gpu}
mkdir -p "$OUT"
SITE=${SITE:-/tmp/mg-site}
export CUDACXX=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
export MPSGRAPH_CACHE_DIR=${MPSGRAPH_CACHE_DIR:-/tmp/mg-cache}
t0=$(date +%s)
if ls .whl/*.whl > /dev/null 2>&1 && [ ! -d "$SITE/scipy_openblas32" ]; then
  python3 -m pip install -q --no-index --no-deps --target "$SITE" .whl/*.whl > "$OUT/build.log" 2>&1
fi
rm -rf "$SITE/mpsgraph" "$SITE"/mpsgraph-*
CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) PYTHONPATH=$SITE python3 -m pip install -v --no-build-isolation --no-deps \
  --target "$SITE" . -Cbuild-dir=build/gpu -Ccmake.define.MPSGRAPH_LTO=OFF -Ccmake.define.MPSGRAPH_CUDA=ON \
  >> "$OUT/build.log" 2>&1 || { echo "build failed"; tail -50 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
export PYTHONPATH=$SITE
if [ "${MPSGRAPH_SKIP_TESTS:-0}" != 1 ]; then
  python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_cuda_conv.py tests/test_cuda.py > "$OUT/conv.log" 2>&1
  tail -3 "$OUT/conv.log"
  python3 -m pytest -q -p no:cacheprovider -n 8 -rx tests/test_conformance.py -k "cuda and (conv or pool)" > "$OUT/conformance.log" 2>&1
  tail -1 "$OUT/conformance.log"
  MPSGRAPH_CUDNN=0 python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_conformance.py -k "cuda and conv" \
    > "$OUT/conformance_nocudnn.log" 2>&1
  echo "without cuDNN: $(tail -1 "$OUT/conformance_nocudnn.log")"
fi
python3 benchmarks/gpu.py --json "$OUT/bench.json" "$@" > "$OUT/bench.log" 2>&1
cat "$OUT/bench.log"
echo "total: $(( $(date +%s) - t0 )) s"

#!/usr/bin/env bash
# Include what you use, checked two ways:
#  1. tools/check_includes.py: every std facility a file names has its header included there
#     (a compiler misses the cases where some other header happens to include it);
#  2. every C++ source and every header on its own under cpp/ compiled syntax-only as
#     standard C++20 with a second toolchain (clang + libc++ by default), so what GCC's
#     libstdc++ pulls in transitively, or accepts as an extension, fails here.
# Backend sources that need an SDK (Metal .mm, CUDA) are left out; tools/metal-check covers
# the .mm files.
#
#   tools/check_includes.sh              # all of cpp/
#   tools/check_includes.sh FILE...      # some files
#   CXX=g++ CXXSTDLIB= tools/check_includes.sh   # the same check with another compiler/library
#
# The compiler is $CXX, else the newest clang++(-N) on PATH whose libc++ headers are installed.
# Exit status 2 when there is none (Debian: apt-get install clang libc++-dev libc++abi-dev).
#
# Third-party headers (pybind11, Python, OpenBLAS) are -isystem: -pedantic-errors is for our code.
# Needs the Python used to build (pybind11 and scipy_openblas32 importable) for the include
# dirs of cpp/bindings and the BLAS header; PYTHON overrides which interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
JOBS=${JOBS:-2}
if [ $# -eq 0 ]; then
  "$PYTHON" tools/check_includes.py cpp
else
  "$PYTHON" tools/check_includes.py "$@"
fi
CXXSTDLIB=${CXXSTDLIB--stdlib=libc++}
works() { echo '#include <vector>' | "$1" -x c++ -std=c++20 $CXXSTDLIB -fsyntax-only - >/dev/null 2>&1; }
if [ -z "${CXX:-}" ]; then
  for c in clang++-21 clang++-20 clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++-14 clang++; do
    if command -v "$c" >/dev/null && works "$c"; then CXX=$c; break; fi
  done
fi
if [ -z "${CXX:-}" ] || ! works "$CXX"; then
  echo "check_includes: no clang++ with libc++ headers (Debian: apt-get install clang libc++-dev libc++abi-dev)" >&2
  exit 2
fi
read -r -a PYINC < <("$PYTHON" - <<'PY'
import sysconfig
import pybind11
import scipy_openblas32
print(" ".join("-isystem" + p for p in (pybind11.get_include(), sysconfig.get_paths()["include"]))
      + " -isystem" + scipy_openblas32.get_include_dir())
PY
)
# _LIBCPP_REMOVE_TRANSITIVE_INCLUDES: libc++ drops the includes it keeps only for old code.
# _LIBCPP_ABI_OPTIMIZED_FUNCTION: libc++'s lighter std::function; nothing is linked here, so
# its ABI does not matter, and it checks the kernel files 7x faster (one std::function per
# kernel lambda otherwise instantiates hundreds of tuple/compressed_pair types).
FLAGS=(-fsyntax-only -std=c++20 ${CXXSTDLIB} -pedantic-errors -Icpp -isystem third_party "${PYINC[@]}"
       -DMG_BLAS_SCIPY_OPENBLAS)
if [ -n "$CXXSTDLIB" ]; then FLAGS+=(-D_LIBCPP_REMOVE_TRANSITIVE_INCLUDES -D_LIBCPP_ABI_OPTIMIZED_FUNCTION); fi
if [ $# -gt 0 ]; then
  FILES=("$@")
else
  # sources, and each header on its own (a header must compile without help from the file
  # that includes it); metal_internal.h is Objective-C++ and left to tools/metal-check
  mapfile -t FILES < <(find cpp \( -name '*.cpp' -o -name '*.h' \) -not -path 'cpp/backends/cuda/*' \
                         \( -not -path 'cpp/backends/metal/*' -o -name metal_stub.cpp -o -name metal_backend.h \) | sort)
  FILES+=(cpp/backends/cuda/cuda_stub.cpp)  # the stub built where the CUDA toolkit is absent
fi
echo "check_includes: $CXX ${FLAGS[*]:1:3} on ${#FILES[@]} files"
export CXX
# a header is checked as a translation unit holding only its #include
check_one='case "$1" in
  *.h) printf "#include \"%s\"\n" "${1#cpp/}" | "$CXX" "${@:2}" -x c++ - ;;
  *) "$CXX" "${@:2}" "$1" ;;
esac || { echo "FAILED: $1"; exit 1; }'
if printf '%s\0' "${FILES[@]}" | xargs -0 -P "$JOBS" -I{} bash -c "$check_one" bash {} "${FLAGS[@]}"; then
  echo "check_includes: all files compile"
else
  echo "check_includes: some files do not compile (see FAILED above)" >&2
  exit 1
fi

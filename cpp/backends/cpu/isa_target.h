// Runtime ISA dispatch on the CPU: attributes that compile a function for a wider x86 ISA than
// the baseline, and the widest one this CPU runs (vec_math, conv_depthwise). The environment
// variable MPSGRAPH_CPU_ISA=generic|avx2|avx512 caps the choice (tests check every path).
#pragma once

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define MG_CPU_X86 1
#if defined(__clang__)
#define MG_TARGET_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma"), min_vector_width(512)))
#else
#define MG_TARGET_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma,prefer-vector-width=512")))
#endif
#define MG_TARGET_AVX2 __attribute__((target("avx2,fma")))
#else
#define MG_CPU_X86 0
#endif

namespace mg::cpu {

enum class Isa { Generic, Avx2, Avx512 };

// Supported by this CPU and allowed by MPSGRAPH_CPU_ISA (read once).
Isa best_isa();

}  // namespace mg::cpu

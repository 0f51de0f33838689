// Fused elementwise groups on the CPU: chains of elementwise ops over one shape (float32,
// float16, bfloat16 and bool values; operands of any shape that broadcasts to it; arithmetic,
// comparisons, select, clamp and casts) run as one pass over L1-sized tiles, so intermediates
// never reach memory. MPSGRAPH_CPU_FUSION=0 at compile time turns it off (tests compare both).
#pragma once
#include <cstdint>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "runtime/fusion_groups.h"

namespace mg::cpu {

// Groups of two or more nodes: a node joins its consumer's group when the consumer is its only
// reader and it is not a target. Nodes marked in `skip` are left alone.
FusionPlan plan_fusion(const Graph& g, const std::vector<ValueRef>& targets, const std::vector<char>& skip);

// The kernel of one group; `inputs` receives the values it reads, in the kernel's input order.
KernelFn make_fused_kernel(const Graph& g, const std::vector<int32_t>& nodes, std::vector<ValueRef>& inputs);

}  // namespace mg::cpu

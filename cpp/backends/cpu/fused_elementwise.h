// Fused elementwise groups on the CPU: chains of elementwise ops over one shape (float32,
// float16, bfloat16 and bool values; operands of any shape that broadcasts to it; arithmetic,
// comparisons, select, clamp and casts) run as one pass over L1-sized tiles, so intermediates
// never reach memory. A group may end in a reduction of its root (sum, product, mean, maximum,
// minimum, sum_to_like over trailing or leading axes), which adds the values as they are made,
// in its own kernel's order. MPSGRAPH_CPU_FUSION=0 at compile time turns it off (tests compare both).
#pragma once
#include <cstdint>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "runtime/fusion_groups.h"

namespace mg::cpu {

// Fusion (of groups, reductions into them, matrix products' epilogues) is on unless
// MPSGRAPH_CPU_FUSION=0.
bool cpu_fusion_enabled();

// Groups of two or more nodes: a node joins its consumer's group when the consumer is its only
// reader and it is not a target; a reduction that is the only reader of a group's root (or of
// a lone fusible node) becomes the group's last node. Nodes marked in `skip` are left alone.
FusionPlan plan_fusion(const Graph& g, const std::vector<ValueRef>& targets, const std::vector<char>& skip);

// The kernel of one group; `inputs` receives the values it reads, in the kernel's input order.
KernelFn make_fused_kernel(const Graph& g, const std::vector<int32_t>& nodes, std::vector<ValueRef>& inputs);

}  // namespace mg::cpu

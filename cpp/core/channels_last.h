// Channels-last planning: a specialised graph whose 2-D convolutions keep their activations
// in NHWC between them, for backends whose convolution kernels are faster channels-last (cuDNN's
// tensor-core kernels in float16/bfloat16 convert NCHW inside every call otherwise).
//
// Each chosen convolution becomes transpose(NHWC -> NCHW) -> convolution -> transpose(NCHW ->
// NHWC), the pair a backend that reads and writes permuted buffers absorbs, and the elementwise
// ops after it run on the NHWC values (their broadcast operands reshaped or transposed to
// match), so the transposes between two convolutions cancel. Every other reader gets the NCHW
// value back through one transpose, so results are the same values, element for element.
#pragma once
#include <functional>

#include "core/graph.h"
#include "core/specialise.h"

namespace mg {

// `wants` picks the convolutions (op "convolution", 4-D) to run channels-last; the graph is
// returned unchanged when it picks none, or holds control flow or data-dependent nodes.
// `weights_ohwi`: the chosen convolutions' constant weights become (O, H, W, C) constants read
// through a transpose, for a backend whose convolution absorbs it (its kernels then find the
// weights in the order they want, not copied into it by every run).
Specialised plan_channels_last(const Specialised& sg, const std::function<bool(const Node&)>& wants,
                               bool weights_ohwi = false);

// The mirror for backends whose kernels run NCHW (the CPU's): an NHWC graph's values stay NCHW
// between the transposes its front ends put around convolutions and pools, the elementwise ops
// between them run on the NCHW values, so those transposes cancel. Unchanged without such
// transposes.
Specialised plan_channels_first(const Specialised& sg);

}  // namespace mg

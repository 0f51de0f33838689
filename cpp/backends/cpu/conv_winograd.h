// Winograd F(2x2, 3x3) convolutions on the CPU (conv_winograd.cpp).
#pragma once
#include "backends/cpu/conv_epilogue.h"
#include "backends/cpu/cpu_backend.h"

namespace mg::cpu {

// The forward float32 convolution of c as Winograd F(2x2, 3x3), with the epilogue when given
// (its operands follow the source and weights among the inputs); empty where it does not apply
// (not 3x3, strided, dilated, grouped) or would not pay (few channels, small planes). `generic`
// makes the kernel of the generic path (same inputs, epilogue included), run instead when a
// source value or weight is not finite. Weights that are a graph constant (c.constant(1)) are
// transformed here, once, so smaller images pay too.
KernelFn make_winograd_kernel(const KernelCtx& c, const ConvEpilogue* epilogue, const KernelFactory& generic);

}  // namespace mg::cpu

// Lowerings of the convolution primitives (cpp/core/ops/convolution.cpp): convolution,
// convolution_data_gradient and convolution_weights_gradient in the canonical layout, source
// (N, C, *S), weights (O, C/groups, *K), with strides, dilation_rates, groups and the padding
// resolved on the node (typed ConvolutionAttrs, core/ops/convolution_attrs.h: 2k padding values,
// before and after per spatial dim; specialisation resolves the 'same' styles into it, so the
// descriptor always gets explicit padding).
//   k = 1: the 2-D ops on (N, C, 1, W) / (O, I, 1, K) (height 1, stride, dilation 1, no padding)
//   k = 2: MPSGraphConvolution2DOpDescriptor, NCHW / OIHW
//   k = 3: MPSGraphConvolution3DOpDescriptor, NCDHW / OIDHW (macOS 13.2; before it, NotImplemented)
//   k > 3: NotImplemented (MPSGraph has no N-d convolution)
// The data gradient's outputShape is the node's declared source shape (it may come from `like`,
// output_padding or source_spatial_shape); the weights gradient's is the declared weights shape.
#include <algorithm>
#include <string>
#include <vector>

#include "backends/metal/metal_internal.h"
#include "core/ops/convolution_attrs.h"

namespace mg::metal {

namespace {

using T = MPSGraphTensor*;
using Ints = std::vector<int64_t>;

struct ConvGeom {
  size_t k = 0;  // spatial rank of the node
  Ints strides, dilations, padding;
  int64_t groups = 1;
};

ConvGeom read_geometry(LowerCtx& c, size_t rank) {
  const ops::ConvolutionAttrs& a = typed_attrs<ops::ConvolutionAttrs>(c.node);
  ConvGeom g;
  if (rank < 3) c.fail(ErrorKind::Value, "convolution tensors need rank >= 3 (N, C, spatial...)");
  g.k = rank - 2;
  g.strides = a.strides;
  g.dilations = a.dilation_rates;
  g.padding = a.padding;
  g.groups = a.groups;
  // inference stores full-length lists and resolves the padding styles at specialisation
  if (g.strides.size() != g.k || g.dilations.size() != g.k || g.padding.size() != 2 * g.k || g.groups < 1)
    c.fail(ErrorKind::NotImplemented, "the metal lowering needs the strides, dilation_rates and padding resolved per "
                                      "spatial dim (got " + std::to_string(g.strides.size()) + ", " +
                                          std::to_string(g.dilations.size()) + " and " + std::to_string(g.padding.size()) +
                                          " values for " + std::to_string(g.k) + " spatial dims)");
  for (size_t i = 0; i < g.k; ++i)
    if (g.strides[i] < 1 || g.dilations[i] < 1 || g.padding[2 * i] < 0 || g.padding[2 * i + 1] < 0)
      c.fail(ErrorKind::Value, "bad convolution geometry");
  if (g.k > 3)
    c.fail(ErrorKind::NotImplemented, std::to_string(g.k) + "-d convolutions are not implemented on the metal backend "
                                      "(MPSGraph has 2-D and 3-D convolutions only)");
  return g;
}

// A 1-D convolution's shapes as 2-D ones: a height-1 dim inserted before the last.
Shape as_2d(const Shape& s, size_t k) {
  if (k != 1) return s;
  Shape r = s;
  r.insert(r.end() - 1, 1);
  return r;
}

MPSGraphConvolution2DOpDescriptor* desc2d(const ConvGeom& g,
                                          MPSGraphTensorNamedDataLayout data = MPSGraphTensorNamedDataLayoutNCHW,
                                          MPSGraphTensorNamedDataLayout weights = MPSGraphTensorNamedDataLayoutOIHW) {
  // k == 2: (H, W) = spatial dims (0, 1); k == 1: H is the inserted height-1 dim
  const bool one = g.k == 1;
  const size_t w = one ? 0 : 1;
  return [MPSGraphConvolution2DOpDescriptor descriptorWithStrideInX:NSUInteger(g.strides[w])
                                                          strideInY:NSUInteger(one ? 1 : g.strides[0])
                                                    dilationRateInX:NSUInteger(g.dilations[w])
                                                    dilationRateInY:NSUInteger(one ? 1 : g.dilations[0])
                                                             groups:NSUInteger(g.groups)
                                                        paddingLeft:NSUInteger(g.padding[2 * w])
                                                       paddingRight:NSUInteger(g.padding[2 * w + 1])
                                                         paddingTop:NSUInteger(one ? 0 : g.padding[0])
                                                      paddingBottom:NSUInteger(one ? 0 : g.padding[1])
                                                       paddingStyle:MPSGraphPaddingStyleExplicit
                                                         dataLayout:data
                                                      weightsLayout:weights];
}

API_AVAILABLE(macos(13.2))
MPSGraphConvolution3DOpDescriptor* desc3d(const ConvGeom& g, bool data_last = false, bool weights_spatial = false) {
  // spatial dims (D, H, W) = (Z, Y, X)
  return [MPSGraphConvolution3DOpDescriptor descriptorWithStrideInX:NSUInteger(g.strides[2])
                                                          strideInY:NSUInteger(g.strides[1])
                                                          strideInZ:NSUInteger(g.strides[0])
                                                    dilationRateInX:NSUInteger(g.dilations[2])
                                                    dilationRateInY:NSUInteger(g.dilations[1])
                                                    dilationRateInZ:NSUInteger(g.dilations[0])
                                                             groups:NSUInteger(g.groups)
                                                        paddingLeft:NSUInteger(g.padding[4])
                                                       paddingRight:NSUInteger(g.padding[5])
                                                         paddingTop:NSUInteger(g.padding[2])
                                                      paddingBottom:NSUInteger(g.padding[3])
                                                       paddingFront:NSUInteger(g.padding[0])
                                                        paddingBack:NSUInteger(g.padding[1])
                                                       paddingStyle:MPSGraphPaddingStyleExplicit
                                                         dataLayout:data_last ? MPSGraphTensorNamedDataLayoutNDHWC
                                                                              : MPSGraphTensorNamedDataLayoutNCDHW
                                                      weightsLayout:weights_spatial ? MPSGraphTensorNamedDataLayoutDHWIO
                                                                                    : MPSGraphTensorNamedDataLayoutOIDHW];
}

// Before macOS 15.1 MPSGraph's convolutions fail on outputs with a channel or spatial dim above
// 65536 (PyTorch refuses them: "Output channels > 65536 not supported at the MPS device"); a 1-D
// convolution, mapped to (N, C, 1, W), meets it first. Refused here, naming the dim, instead of
// an abort or a wrong result. `y` is the forward convolution's output (dy for the gradients).
void check_output_dims(LowerCtx& c, const Shape& y) {
  if (@available(macOS 15.1, *)) return;
  for (size_t i = 1; i < y.size(); ++i)
    if (y[i] > 65536)
      c.fail(ErrorKind::NotImplemented,
             "a convolution output of shape " + shape_str(y) + " (dim " + std::to_string(i) + " > 65536) needs macOS 15.1 "
             "or newer on the metal backend (MPSGraph's convolutions fail on it before 15.1)");
}

[[noreturn]] void needs_13_2(LowerCtx& c) {
  c.needs_macos("13.2", "3-d convolution (MPSGraph's convolution3D and MPSGraphConvolution3DOpDescriptor)");
}

// ---- the convolution_2d / convolution_3d front ends, natively in the user's layout ----
// These composites have no typed attributes (core/ops/convolution.cpp: "backends never see
// them" unless they claim them), so the geometry is read by name as their decomposition does.
// The padding comes from the node's inferred output shape, which the core computed with the
// style's rule: total = (out - 1) stride + (k - 1) dilation + 1 - in, split as the style says
// ('same': the odd one at the end, 'same_lower': at the start), exactly the core's split.
struct FrontGeom {
  ConvGeom g;
  bool data_last = true, weights_spatial = true;
};

bool front_claim(const Node& n, size_t k) {
  const TensorType& y = n.outputs.at(0);
  if (!is_floating(y.dtype) || y.dtype == DType::Float64 || y.shape.size() != k + 2) return false;
  if (node_attr<std::vector<int64_t>>(n, "strides").size() != k ||
      node_attr<std::vector<int64_t>>(n, "dilation_rates").size() != k || node_attr<int64_t>(n, "groups") < 1)
    return false;
  const std::string& style = node_attr<std::string>(n, "padding_style");
  if (style == "explicit" && node_attr<std::vector<int64_t>>(n, "padding").size() != 2 * k) return false;
  if (k == 3) {
    if (@available(macOS 13.2, *)) return true;
    return false;  // expanded: the primitive says it needs 13.2
  }
  return true;
}

FrontGeom front_geometry(LowerCtx& c, size_t k) {
  FrontGeom f;
  f.data_last = node_attr<std::string>(c.node, "data_layout") == (k == 3 ? "NDHWC" : "NHWC");
  f.weights_spatial = node_attr<std::string>(c.node, "weights_layout") == (k == 3 ? "DHWIO" : "HWIO");
  ConvGeom& g = f.g;
  g.k = k;
  g.strides = node_attr<std::vector<int64_t>>(c.node, "strides");
  g.dilations = node_attr<std::vector<int64_t>>(c.node, "dilation_rates");
  g.groups = node_attr<int64_t>(c.node, "groups");
  const std::string& style = node_attr<std::string>(c.node, "padding_style");
  const Shape &xs = c.in_types[0].shape, &ws = c.in_types[1].shape, &ys = c.out().shape;
  for (size_t i = 0; i < k; ++i) {
    const int64_t in = xs[(f.data_last ? 1 : 2) + i], out = ys[(f.data_last ? 1 : 2) + i];
    const int64_t kk = ws[(f.weights_spatial ? 0 : 2) + i];
    int64_t before = 0, after = 0;
    if (style == "explicit") {
      before = node_attr<std::vector<int64_t>>(c.node, "padding")[2 * i];
      after = node_attr<std::vector<int64_t>>(c.node, "padding")[2 * i + 1];
    } else if (style == "same" || style == "same_lower") {
      const int64_t total = std::max<int64_t>((out - 1) * g.strides[i] + (kk - 1) * g.dilations[i] + 1 - in, 0);
      const int64_t small = total / 2;
      before = style == "same" ? small : total - small;
      after = total - before;
    } else if (style != "valid") {
      c.fail(ErrorKind::Value, "padding_style must be 'explicit', 'valid', 'same' or 'same_lower', not '" + style + "'");
    }
    if (before < 0 || after < 0) c.fail(ErrorKind::Value, "bad convolution geometry");
    g.padding.push_back(before);
    g.padding.push_back(after);
  }
  return f;
}

}  // namespace

void register_convolution_lowerings() {
  // convolution_2d / convolution_3d (composites): one MPSGraph convolution in the user's layouts
  // (NHWC / NCHW with HWIO / OIHW; NDHWC / NCDHW with DHWIO / OIDHW), no transposes around it.
  // Their gradients come from the decomposition: the primitives' data / weights gradients below.
  register_composite_lowering(
      "convolution_2d", [](const Node& n) { return front_claim(n, 2); },
      [](LowerCtx& c) {
        if (!c.in[0] || !c.in[1]) return std::vector<T>{c.fill(0, c.out())};  // no input channels: zeros
        FrontGeom f = front_geometry(c, 2);
        const Shape& y = c.out().shape;
        check_output_dims(c, f.data_last ? Shape{y[0], y[3], y[1], y[2]} : y);
        auto* d = desc2d(f.g, f.data_last ? MPSGraphTensorNamedDataLayoutNHWC : MPSGraphTensorNamedDataLayoutNCHW,
                         f.weights_spatial ? MPSGraphTensorNamedDataLayoutHWIO : MPSGraphTensorNamedDataLayoutOIHW);
        return std::vector<T>{[c.g convolution2DWithSourceTensor:c.in[0] weightsTensor:c.in[1] descriptor:d name:nil]};
      });
  register_composite_lowering(
      "convolution_3d", [](const Node& n) { return front_claim(n, 3); },
      [](LowerCtx& c) {
        if (!c.in[0] || !c.in[1]) return std::vector<T>{c.fill(0, c.out())};  // no input channels: zeros
        FrontGeom f = front_geometry(c, 3);
        const Shape& y = c.out().shape;
        check_output_dims(c, f.data_last ? Shape{y[0], y[4], y[1], y[2], y[3]} : y);
        if (@available(macOS 13.2, *))
          return std::vector<T>{[c.g convolution3DWithSourceTensor:c.in[0]
                                                     weightsTensor:c.in[1]
                                                        descriptor:desc3d(f.g, f.data_last, f.weights_spatial)
                                                              name:nil]};
        needs_13_2(c);
      });

  // convolution(source, weights)
  register_lowering("convolution", [](LowerCtx& c) {
    ConvGeom g = read_geometry(c, c.in_types[0].shape.size());
    check_output_dims(c, c.out().shape);
    T x = c.reshape(c.in[0], as_2d(c.in_types[0].shape, g.k));
    T w = c.reshape(c.in[1], as_2d(c.in_types[1].shape, g.k));
    if (g.k == 3) {
      if (@available(macOS 13.2, *))
        return std::vector<T>{[c.g convolution3DWithSourceTensor:x weightsTensor:w descriptor:desc3d(g) name:nil]};
      needs_13_2(c);
    }
    return std::vector<T>{[c.g convolution2DWithSourceTensor:x weightsTensor:w descriptor:desc2d(g) name:nil]};
  });

  // convolution_data_gradient(incoming_gradient, weights, like) -> the source's shape
  register_lowering("convolution_data_gradient", [](LowerCtx& c) {
    ConvGeom g = read_geometry(c, c.in_types[0].shape.size());
    check_output_dims(c, c.in_types[0].shape);
    T dy = c.reshape(c.in[0], as_2d(c.in_types[0].shape, g.k));
    T w = c.reshape(c.in[1], as_2d(c.in_types[1].shape, g.k));
    MPSShape* out = mps_shape(as_2d(c.out().shape, g.k));
    if (g.k == 3) {
      if (@available(macOS 13.2, *))
        return std::vector<T>{[c.g convolution3DDataGradientWithIncomingGradientTensor:dy
                                                                          weightsTensor:w
                                                                            outputShape:out
                                                           forwardConvolutionDescriptor:desc3d(g)
                                                                                   name:nil]};
      needs_13_2(c);
    }
    return std::vector<T>{[c.g convolution2DDataGradientWithIncomingGradientTensor:dy
                                                                      weightsTensor:w
                                                                        outputShape:out
                                                       forwardConvolutionDescriptor:desc2d(g)
                                                                               name:nil]};
  });

  // convolution_weights_gradient(incoming_gradient, source, like) -> the weights' shape
  register_lowering("convolution_weights_gradient", [](LowerCtx& c) {
    ConvGeom g = read_geometry(c, c.in_types[0].shape.size());
    check_output_dims(c, c.in_types[0].shape);
    T dy = c.reshape(c.in[0], as_2d(c.in_types[0].shape, g.k));
    T x = c.reshape(c.in[1], as_2d(c.in_types[1].shape, g.k));
    MPSShape* out = mps_shape(as_2d(c.out().shape, g.k));
    if (g.k == 3) {
      if (@available(macOS 13.2, *))
        return std::vector<T>{[c.g convolution3DWeightsGradientWithIncomingGradientTensor:dy
                                                                              sourceTensor:x
                                                                               outputShape:out
                                                              forwardConvolutionDescriptor:desc3d(g)
                                                                                      name:nil]};
      needs_13_2(c);
    }
    return std::vector<T>{[c.g convolution2DWeightsGradientWithIncomingGradientTensor:dy
                                                                          sourceTensor:x
                                                                           outputShape:out
                                                          forwardConvolutionDescriptor:desc2d(g)
                                                                                  name:nil]};
  });
}

}  // namespace mg::metal

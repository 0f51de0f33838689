// Composite ops that MPSGraph has as one op, lowered to that op instead of their decomposition
// (Backend::implements_composite claims them at specialisation; see register_composite_lowering):
//   softmax                   softMaxWithTensor:axis:name:
//   softmax_cross_entropy     softMaxCrossEntropyWithSourceTensor:labelsTensor:axis:reductionType:name:
//   normalization             normalizationWithTensor:meanTensor:varianceTensor:gammaTensor:betaTensor:epsilon:name:
//   batch_, layer_, instance_, group_normalization
//                             meanOfTensor:axes:name: + varianceOfTensor:axes:name: + the normalization op
//   leaky_relu (0 <= alpha <= 1)  leakyReLUWithTensor:alpha:name: (12.0)
//   stochastic_gradient_descent   stochasticGradientDescentWithLearningRateTensor:valuesTensor:gradientTensor:name:
//   adam, adamw               adamWithLearningRateTensor:...:maximumVelocityTensor:gradientTensor:name:
// and the gradient composites that their gradient rules make (core/ops/gradient_composite.h):
//   softmax_gradient          softMaxGradientWithIncomingGradient:sourceTensor:axis:name:
//   softmax_cross_entropy_gradient
//                             softMaxCrossEntropyGradientWithIncomingGradientTensor:sourceTensor:labelsTensor:...
//   batch_normalization_gradient (training), instance_normalization_gradient
//                             normalizationGradientWithIncomingGradientTensor:... with
//                             normalizationGammaGradient... / normalizationBetaGradient...
// float16 / bfloat16 run in float32 and are rounded once (the CPU accumulates in float32 too).
// The other gradient composites (layer / group normalisation, batch normalisation with running
// statistics) are expanded, as PyTorch's MPS backend composes those gradients too.
// These composites have no typed attributes (core/ops/nn.cpp, normalization.cpp decode none),
// so their few attributes are read from the node by name here, as the decompositions read them.
#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/metal/metal_internal.h"
#include "core/shape.h"

namespace mg::metal {

namespace {

using T = MPSGraphTensor*;

bool float_out(const Node& n) {
  for (auto& t : n.outputs)
    if (!is_floating(t.dtype) || t.dtype == DType::Float64) return false;
  return true;
}

// float16 / bfloat16 in float32; back to the node's dtype at the end.
T f32(LowerCtx& c, T x) { return x == nil ? nil : c.raw_cast(x, DType::Float32); }
T back(LowerCtx& c, T x, size_t k = 0) { return c.raw_cast(x, c.out(k).dtype); }

// The input in schema slot i (nil for an absent optional one), with its type.
struct In {
  T t = nil;
  const TensorType* type = nullptr;
};
In schema_in(LowerCtx& c, size_t i) {
  size_t given = 0;
  for (size_t s = 0; s < i; ++s)
    if (s >= c.node.absent.size() || !c.node.absent[s]) ++given;
  if (i < c.node.absent.size() && c.node.absent[i]) return {};
  return {c.in.at(given), &c.in_types.at(given)};
}

NSArray<NSNumber*>* ns_axes(const std::vector<int64_t>& axes) {
  NSMutableArray<NSNumber*>* a = [NSMutableArray arrayWithCapacity:axes.size()];
  for (int64_t x : axes) [a addObject:@(x)];
  return a;
}

int64_t norm_axis(LowerCtx& c, int64_t axis, size_t rank) {
  const int64_t r = int64_t(rank);
  if (axis < -r || axis >= r) c.fail(ErrorKind::Value, "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(r));
  return axis < 0 ? axis + r : axis;
}

// (x - mean) / sqrt(var + eps) * gamma + beta with MPSGraph's op, in float32; gamma and beta
// default to 1 and 0 (the header does not say they may be nil).
T normalize(LowerCtx& c, T x, T mean, T var, T gamma, T beta, double eps) {
  const DType F = DType::Float32;
  return [c.g normalizationWithTensor:x
                           meanTensor:mean
                       varianceTensor:var
                          gammaTensor:gamma ? gamma : c.k(1, F)
                           betaTensor:beta ? beta : c.k(0, F)
                              epsilon:float(eps)
                                 name:nil];
}

// x's mean and population variance over `axes` (kept as size 1), float32.
std::pair<T, T> moments(LowerCtx& c, T x, const std::vector<int64_t>& axes) {
  NSArray<NSNumber*>* a = ns_axes(axes);
  return {[c.g meanOfTensor:x axes:a name:nil], [c.g varianceOfTensor:x axes:a name:nil]};
}

// A (C,) parameter shaped to broadcast along `axis` of a rank-r tensor.
T per_channel(LowerCtx& c, T p, const TensorType* pt, int64_t axis, size_t rank) {
  if (p == nil) return nil;
  Shape s(rank, 1);
  s[size_t(axis)] = pt->shape.at(0);
  return c.reshape(f32(c, p), s);
}

// The batch / instance normalisations' last step: gamma (schema slot 1) and beta (slot 2) are
// per channel along axis `ax`; the result in the node's dtype.
T normalize_per_channel(LowerCtx& c, T x, T mean, T var, int64_t ax, size_t rank) {
  In gm = schema_in(c, 1), bt = schema_in(c, 2);
  T y = normalize(c, x, mean, var, per_channel(c, gm.t, gm.type, ax, rank), per_channel(c, bt.t, bt.type, ax, rank),
                  node_attr<double>(c.node, "epsilon"));
  return back(c, y);
}

int64_t channel_axis_of(const std::string& layout, size_t rank) { return layout.size() > 1 && layout[1] == 'C' ? 1 : int64_t(rank) - 1; }

// A claimed composite is lowered even when an input is zero-size (nil here) but its result is
// not (the host evaluator has no kernel for a composite): only softmax_cross_entropy can meet
// that (a reduction over no positions), and handles it; for the
// others a zero-size input makes the result zero-size too.
void no_empty_inputs(LowerCtx& c) {
  for (T t : c.in)
    if (t == nil) c.fail(ErrorKind::NotImplemented, "a zero-size input next to a non-empty result is not implemented here "
                                                    "on the metal backend");
}

// The gradients of a per-channel normalisation (gamma, beta along `ax`) whose statistics are
// x's over `axes`: inputs (incoming_gradient, x, gamma?, beta?, ...), outputs dx, then dgamma
// and dbeta for a present gamma / beta. `per_sample`: the statistics are per (sample, channel)
// (instance normalisation), so gamma's and beta's gradients also sum over the batch.
std::vector<T> normalization_gradients(LowerCtx& c, const std::vector<int64_t>& axes, int64_t ax, bool per_sample) {
  const size_t rank = c.in_types[1].shape.size();
  const double eps = node_attr<double>(c.node, "epsilon");
  NSArray<NSNumber*>* a = ns_axes(axes);
  T dy = f32(c, c.in[0]), x = f32(c, c.in[1]);
  auto [mean, var] = moments(c, x, axes);
  In gm = schema_in(c, 2), bt = schema_in(c, 3);
  T dgamma = [c.g normalizationGammaGradientWithIncomingGradientTensor:dy
                                                          sourceTensor:x
                                                            meanTensor:mean
                                                        varianceTensor:var
                                                         reductionAxes:a
                                                               epsilon:float(eps)
                                                                  name:nil];
  T dbeta = [c.g normalizationBetaGradientWithIncomingGradientTensor:dy sourceTensor:x reductionAxes:a name:nil];
  T dx = [c.g normalizationGradientWithIncomingGradientTensor:dy
                                                 sourceTensor:x
                                                   meanTensor:mean
                                               varianceTensor:var
                                                  gammaTensor:per_channel(c, gm.t, gm.type, ax, rank)
                                          gammaGradientTensor:dgamma
                                           betaGradientTensor:dbeta
                                                reductionAxes:a
                                                      epsilon:float(eps)
                                                         name:nil];
  std::vector<T> outs{back(c, dx)};
  size_t k = 1;
  for (auto [p, d] : {std::pair{gm, dgamma}, std::pair{bt, dbeta}}) {
    if (!p.t) continue;
    if (per_sample) d = [c.g reductionSumWithTensor:d axis:0 name:nil];
    outs.push_back(back(c, c.reshape(d, c.out(k).shape), k));
    ++k;
  }
  return outs;
}

MPSGraphLossReductionType loss_reduction(LowerCtx& c, const std::string& r) {
  if (r == "sum") return MPSGraphLossReductionTypeSum;
  if (r == "mean") return MPSGraphLossReductionTypeMean;  // 12.0
  if (r == "none") return MPSGraphLossReductionTypeAxis;  // = None (whose name is 14.0)
  c.fail(ErrorKind::Value, "reduction must be 'none', 'sum' or 'mean', not '" + r + "'");
}

}  // namespace

void register_nn_lowerings() {
  // softmax(x, axis): rank >= 1 (a rank-0 softmax is expanded: it is 1, or NaN for inf / NaN)
  register_composite_lowering(
      "softmax", [](const Node& n) { return float_out(n) && !n.outputs[0].shape.empty(); },
      [](LowerCtx& c) {
        no_empty_inputs(c);
        const int64_t axis = norm_axis(c, node_attr<int64_t>(c.node, "axis"), c.in_types[0].shape.size());
        return std::vector<T>{back(c, [c.g softMaxWithTensor:f32(c, c.in[0]) axis:NSInteger(axis) name:nil])};
      });

  // softmax_cross_entropy(x, labels, axis, reduction): -sum(labels * log_softmax(x)) along axis,
  // then none / sum / mean over the other positions; x and labels broadcast first.
  register_composite_lowering("softmax_cross_entropy", float_out, [](LowerCtx& c) {
    auto bs = broadcast_shapes(c.in_types[0].shape, c.in_types[1].shape);
    if (!bs || bs->empty()) c.fail(ErrorKind::Value, "internal error: softmax_cross_entropy operands do not broadcast");
    const int64_t axis = norm_axis(c, node_attr<int64_t>(c.node, "axis"), bs->size());
    const std::string& reduction = node_attr<std::string>(c.node, "reduction");
    if (num_elements(*bs) == 0) {  // no positions: the sum is 0, the mean NaN (the CPU's reductions)
      if ((*bs)[size_t(axis)] == 0)  // as the decomposition's maximum over no classes
        c.fail(ErrorKind::Value, "zero-size class axis " + std::to_string(axis) + " in " + shape_str(*bs) +
                                     ": the softmax's maximum has no identity");
      return std::vector<T>{c.fill(reduction == "mean" ? std::nan("") : 0.0, c.out())};
    }
    T x = c.broadcast(f32(c, c.in[0]), *bs), labels = c.broadcast(f32(c, c.in[1]), *bs);
    T loss = [c.g softMaxCrossEntropyWithSourceTensor:x
                                         labelsTensor:labels
                                                 axis:NSInteger(axis)
                                        reductionType:loss_reduction(c, reduction)
                                                 name:nil];
    return std::vector<T>{back(c, loss)};  // conform reshapes to the declared (kept-axis or scalar) shape
  });

  // normalization(x, mean, variance, gamma?, beta?, epsilon)
  register_composite_lowering("normalization", float_out, [](LowerCtx& c) {
    no_empty_inputs(c);
    T x = f32(c, c.in[0]), mean = f32(c, c.in[1]), var = f32(c, c.in[2]);
    T gamma = f32(c, schema_in(c, 3).t), beta = f32(c, schema_in(c, 4).t);
    return std::vector<T>{back(c, normalize(c, x, mean, var, gamma, beta, node_attr<double>(c.node, "epsilon")))};
  });

  // batch_normalization(x, gamma?, beta?, running_mean?, running_variance?; training, epsilon, channel_axis)
  register_composite_lowering("batch_normalization", float_out, [](LowerCtx& c) {
    no_empty_inputs(c);
    const size_t rank = c.in_types[0].shape.size();
    const int64_t ax = norm_axis(c, node_attr<int64_t>(c.node, "channel_axis"), rank);
    T x = f32(c, c.in[0]);
    T mean, var;
    if (node_attr<bool>(c.node, "training")) {
      std::vector<int64_t> axes;
      for (int64_t i = 0; i < int64_t(rank); ++i)
        if (i != ax) axes.push_back(i);
      std::tie(mean, var) = moments(c, x, axes);
    } else {
      In rm = schema_in(c, 3), rv = schema_in(c, 4);
      if (!rm.t || !rv.t) c.fail(ErrorKind::Value, "training=False needs running_mean and running_variance");
      mean = per_channel(c, rm.t, rm.type, ax, rank);
      var = per_channel(c, rv.t, rv.type, ax, rank);
    }
    return std::vector<T>{normalize_per_channel(c, x, mean, var, ax, rank)};
  });

  // layer_normalization(x, gamma?, beta?; axes (normalised by inference), epsilon)
  register_composite_lowering("layer_normalization", float_out, [](LowerCtx& c) {
    no_empty_inputs(c);
    T x = f32(c, c.in[0]);
    auto [mean, var] = moments(c, x, node_attr<std::vector<int64_t>>(c.node, "axes"));
    T y = normalize(c, x, mean, var, f32(c, schema_in(c, 1).t), f32(c, schema_in(c, 2).t),
                    node_attr<double>(c.node, "epsilon"));
    return std::vector<T>{back(c, y)};
  });

  // instance_normalization(x, gamma?, beta?; epsilon, data_layout): over the spatial dims
  register_composite_lowering("instance_normalization", float_out, [](LowerCtx& c) {
    no_empty_inputs(c);
    const size_t rank = c.in_types[0].shape.size();
    const int64_t ax = channel_axis_of(node_attr<std::string>(c.node, "data_layout"), rank);
    std::vector<int64_t> axes;
    for (int64_t i = 1; i < int64_t(rank); ++i)
      if (i != ax) axes.push_back(i);
    T x = f32(c, c.in[0]);
    auto [mean, var] = moments(c, x, axes);
    return std::vector<T>{normalize_per_channel(c, x, mean, var, ax, rank)};
  });

  // group_normalization(x, gamma?, beta?; num_groups, epsilon, data_layout): x channels first,
  // viewed as (N, G, rest), normalised over rest, then gamma / beta per channel.
  register_composite_lowering("group_normalization", float_out, [](LowerCtx& c) {
    no_empty_inputs(c);
    const Shape& xs = c.in_types[0].shape;
    const size_t rank = xs.size();
    const bool last = channel_axis_of(node_attr<std::string>(c.node, "data_layout"), rank) != 1;
    const int64_t groups = node_attr<int64_t>(c.node, "num_groups");
    T x = f32(c, c.in[0]);
    std::vector<int64_t> to_first{0, int64_t(rank) - 1}, to_last{0};
    for (int64_t i = 1; i < int64_t(rank) - 1; ++i) to_first.push_back(i);
    for (int64_t i = 2; i < int64_t(rank); ++i) to_last.push_back(i);
    to_last.push_back(1);
    Shape cs = xs;  // channels-first shape
    if (last) {
      x = [c.g transposeTensor:x permutation:ns_axes(to_first) name:nil];  // 13.0
      for (size_t i = 0; i < rank; ++i) cs[i] = xs[size_t(to_first[i])];
    }
    const int64_t per_group = num_elements(cs) / std::max<int64_t>(cs[0] * groups, 1);
    T grouped = c.reshape(x, Shape{cs[0], groups, per_group});
    auto [mean, var] = moments(c, grouped, {2});
    T y = c.reshape(normalize(c, grouped, mean, var, nil, nil, node_attr<double>(c.node, "epsilon")), cs);
    In gm = schema_in(c, 1), bt = schema_in(c, 2);
    if (gm.t) y = c.mul(y, per_channel(c, gm.t, gm.type, 1, rank));
    if (bt.t) y = c.add(y, per_channel(c, bt.t, bt.type, 1, rank));
    if (last) y = [c.g transposeTensor:y permutation:ns_axes(to_last) name:nil];
    return std::vector<T>{back(c, y)};
  });

  // softmax_gradient(incoming_gradient, x; axis): Apple documents sourceTensor as the softmax's
  // input (MPSCNNSoftMaxGradient takes the output instead: a Mac parity row checks which)
  register_composite_lowering(
      "softmax_gradient", [](const Node& n) { return float_out(n) && !n.outputs[0].shape.empty(); },
      [](LowerCtx& c) {
        no_empty_inputs(c);
        const Shape& xs = c.in_types[1].shape;
        const int64_t axis = norm_axis(c, node_attr<int64_t>(c.node, "axis"), xs.size());
        T dy = c.broadcast(f32(c, c.in[0]), xs);
        return std::vector<T>{
            back(c, [c.g softMaxGradientWithIncomingGradient:dy sourceTensor:f32(c, c.in[1]) axis:NSInteger(axis) name:nil])};
      });

  // softmax_cross_entropy_gradient(incoming_gradient, x, labels; axis, reduction): the gradient
  // w.r.t. x, claimed where nothing is zero-size. x and labels are broadcast to their common
  // shape first and the result summed back over x's broadcast dims. Assumes what the op
  // documents: labels are probabilities along axis.
  register_composite_lowering(
      "softmax_cross_entropy_gradient", [](const Node& n) { return float_out(n) && num_elements(n.outputs[0].shape) > 0; },
      [](LowerCtx& c) {
        no_empty_inputs(c);
        const Shape& xs = c.in_types[1].shape;
        auto bs = broadcast_shapes(xs, c.in_types[2].shape);
        if (!bs || bs->empty()) c.fail(ErrorKind::Value, "internal error: softmax_cross_entropy operands do not broadcast");
        const int64_t axis = norm_axis(c, node_attr<int64_t>(c.node, "axis"), bs->size());
        T r = [c.g softMaxCrossEntropyGradientWithIncomingGradientTensor:f32(c, c.in[0])
                                                            sourceTensor:c.broadcast(f32(c, c.in[1]), *bs)
                                                            labelsTensor:c.broadcast(f32(c, c.in[2]), *bs)
                                                                    axis:NSInteger(axis)
                                                           reductionType:loss_reduction(c, node_attr<std::string>(c.node, "reduction"))
                                                                    name:nil];
        std::vector<int64_t> summed;  // x's broadcast dims (leading ones, and its size-1 dims)
        const size_t lead = bs->size() - xs.size();
        for (size_t i = 0; i < bs->size(); ++i)
          if ((i < lead || xs[i - lead] == 1) && (*bs)[i] != 1) summed.push_back(int64_t(i));
        if (!summed.empty()) r = [c.g reductionSumWithTensor:r axes:ns_axes(summed) name:nil];
        return std::vector<T>{back(c, c.reshape(r, xs))};
      });

  // batch_normalization_gradient (training) and instance_normalization_gradient: the statistics
  // are x's own, over `axes`, which is what MPSGraph's normalization gradients differentiate
  // through (PyTorch's MPS batch_norm backward, which instance_norm reaches, calls them so).
  register_composite_lowering(
      "batch_normalization_gradient",
      [](const Node& n) { return float_out(n) && node_attr<bool>(n, "training") && num_elements(n.outputs[0].shape) > 0; },
      [](LowerCtx& c) {
        no_empty_inputs(c);
        const size_t rank = c.in_types[1].shape.size();
        const int64_t ax = norm_axis(c, node_attr<int64_t>(c.node, "channel_axis"), rank);
        std::vector<int64_t> axes;
        for (int64_t i = 0; i < int64_t(rank); ++i)
          if (i != ax) axes.push_back(i);
        return normalization_gradients(c, axes, ax, false);
      });
  register_composite_lowering(
      "instance_normalization_gradient", [](const Node& n) { return float_out(n) && num_elements(n.outputs[0].shape) > 0; },
      [](LowerCtx& c) {
        no_empty_inputs(c);
        const size_t rank = c.in_types[1].shape.size();
        const int64_t ax = channel_axis_of(node_attr<std::string>(c.node, "data_layout"), rank);
        std::vector<int64_t> axes;
        for (int64_t i = 1; i < int64_t(rank); ++i)
          if (i != ax) axes.push_back(i);
        return normalization_gradients(c, axes, ax, true);
      });

  // leaky_relu: x if x >= 0 else alpha * x. Claimed for 0 <= alpha <= 1 only, where every
  // formula MPSGraph may use (a select, or max(x, alpha * x)) gives the same values.
  register_composite_lowering(
      "leaky_relu",
      [](const Node& n) {
        const double a = node_attr<double>(n, "alpha");
        return float_out(n) && a >= 0.0 && a <= 1.0;
      },
      [](LowerCtx& c) {
        no_empty_inputs(c);
        return std::vector<T>{
            back(c, [c.g leakyReLUWithTensor:f32(c, c.in[0]) alpha:node_attr<double>(c.node, "alpha") name:nil])};
      });

  // stochastic_gradient_descent(learning_rate, values, gradient) = values - learning_rate * gradient
  register_composite_lowering("stochastic_gradient_descent", float_out, [](LowerCtx& c) {
    no_empty_inputs(c);
    const Shape& vs = c.in_types[1].shape;
    T lr = f32(c, c.in[0]), w = f32(c, c.in[1]), g = c.broadcast(f32(c, c.in[2]), vs);
    return std::vector<T>{
        back(c, [c.g stochasticGradientDescentWithLearningRateTensor:lr valuesTensor:w gradientTensor:g name:nil])};
  });

  // adam / adamw(learning_rate, beta1, beta2, epsilon, beta1_power, beta2_power, values, momentum,
  // velocity, maximum_velocity?, gradient): MPSGraph's update is the decomposition's
  // (lr_t = lr sqrt(1 - beta2^t) / (1 - beta1^t), AMSGrad with maximum_velocity); adamw first
  // applies the decoupled weight decay to the values, as the decomposition does.
  auto adam = [](bool decay) {
    return [decay](LowerCtx& c) {
      no_empty_inputs(c);
      T in[11];
      for (size_t i = 0; i < 11; ++i) in[i] = f32(c, schema_in(c, i).t);
      const Shape& vs = c.out(0).shape;
      T w = in[6];
      if (decay) w = c.sub(w, c.mul(c.mul(in[0], c.k(node_attr<double>(c.node, "weight_decay"), DType::Float32)), w));
      NSArray<MPSGraphTensor*>* r = [c.g adamWithLearningRateTensor:in[0]
                                                        beta1Tensor:in[1]
                                                        beta2Tensor:in[2]
                                                      epsilonTensor:in[3]
                                                   beta1PowerTensor:in[4]
                                                   beta2PowerTensor:in[5]
                                                       valuesTensor:w
                                                     momentumTensor:in[7]
                                                     velocityTensor:in[8]
                                              maximumVelocityTensor:in[9]
                                                     gradientTensor:c.broadcast(in[10], vs)
                                                               name:nil];
      const size_t n = c.out_types.size();
      if (r.count < n) c.fail(ErrorKind::Runtime, "MPSGraph's adam returned " + std::to_string(r.count) + " tensors for " +
                                                      std::to_string(n) + " outputs");
      std::vector<T> outs;
      for (size_t k = 0; k < n; ++k) outs.push_back(back(c, r[k], k));
      return outs;
    };
  };
  register_composite_lowering("adam", float_out, adam(false));
  register_composite_lowering("adamw", float_out, adam(true));
}

}  // namespace mg::metal

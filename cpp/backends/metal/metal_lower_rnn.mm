// Lowerings of the recurrent family (core/ops/rnn.cpp) onto MPSGraph's own ops:
// singleGateRNNWithSourceTensor (12.3), LSTMWithSourceTensor (12.3) and GRUWithSourceTensor
// (13.0), all at or below the deployment target, so no @available gate. The descriptor gets the
// node's attributes one to one; absent optional inputs are passed as nil (MPSGraph's defaults
// are the op's: identity input weight, zero bias and states, unit mask). bfloat16 runs in float32.
#include <vector>

#include "backends/metal/metal_internal.h"
#include "core/ops/rnn_attrs.h"

namespace mg::metal {

namespace {

using T = MPSGraphTensor*;

MPSGraphRNNActivation mps_act(ops::RNNActivation a) { return MPSGraphRNNActivation(int(a)); }

// The node's inputs in schema order (nil where absent), in the compute dtype.
std::vector<T> schema_inputs(LowerCtx& c, DType ct) {
  std::vector<T> r;
  size_t k = 0;
  const size_t n = c.node.absent.empty() ? c.in.size() : c.node.absent.size();
  for (size_t i = 0; i < n; ++i) {
    if (!c.node.absent.empty() && c.node.absent[i]) {
      r.push_back(nil);
      continue;
    }
    r.push_back(c.raw_cast(c.in[k], ct));
    ++k;
  }
  return r;
}

DType compute_dtype(LowerCtx& c) { return c.in_dtype(0) == DType::BFloat16 ? DType::Float32 : c.in_dtype(0); }

// A descriptor with the fields every recurrent op has; the inputs in schema order (n of them).
template <class Desc>
Desc* descriptor(LowerCtx& c, const ops::RNNAttrs& a, std::vector<T>& in, size_t n) {
  in = schema_inputs(c, compute_dtype(c));
  in.resize(n, nil);
  Desc* d = [Desc descriptor];
  d.reverse = a.reverse;
  d.bidirectional = a.bidirectional;
  d.training = NO;
  return d;
}

std::vector<T> conform_all(LowerCtx& c, NSArray<T>* r, size_t n) {
  std::vector<T> out;
  for (size_t i = 0; i < n; ++i) out.push_back(c.conform(r[i], i));
  return out;
}

std::vector<T> lower_single(LowerCtx& c) {
  const ops::RNNAttrs& a = typed_attrs<ops::RNNAttrs>(c.node);
  std::vector<T> in;
  MPSGraphSingleGateRNNDescriptor* d = descriptor<MPSGraphSingleGateRNNDescriptor>(c, a, in, 6);
  d.activation = mps_act(a.activation);
  NSArray<T>* r = [c.g singleGateRNNWithSourceTensor:in[0] recurrentWeight:in[1] inputWeight:in[2] bias:in[3]
                                           initState:in[4] mask:in[5] descriptor:d name:nil];
  return conform_all(c, r, 1);
}

std::vector<T> lower_lstm(LowerCtx& c) {
  const ops::RNNAttrs& a = typed_attrs<ops::RNNAttrs>(c.node);
  std::vector<T> in;
  MPSGraphLSTMDescriptor* d = descriptor<MPSGraphLSTMDescriptor>(c, a, in, 8);
  d.produceCell = a.produce_cell;
  d.forgetGateLast = a.forget_gate_last;
  d.inputGateActivation = mps_act(a.gates[0]);
  d.forgetGateActivation = mps_act(a.gates[1]);
  d.cellGateActivation = mps_act(a.gates[2]);
  d.outputGateActivation = mps_act(a.gates[3]);
  d.activation = mps_act(a.activation);
  NSArray<T>* r = [c.g LSTMWithSourceTensor:in[0] recurrentWeight:in[1] inputWeight:in[2] bias:in[3] initState:in[4]
                                   initCell:in[5] mask:in[6] peephole:in[7] descriptor:d name:nil];
  return conform_all(c, r, a.produce_cell ? 2 : 1);
}

std::vector<T> lower_gru(LowerCtx& c) {
  const ops::RNNAttrs& a = typed_attrs<ops::RNNAttrs>(c.node);
  std::vector<T> in;
  MPSGraphGRUDescriptor* d = descriptor<MPSGraphGRUDescriptor>(c, a, in, 7);
  d.resetGateFirst = a.reset_gate_first;
  d.resetAfter = a.reset_after;
  d.flipZ = a.flip_z;
  d.updateGateActivation = mps_act(a.gates[0]);
  d.resetGateActivation = mps_act(a.gates[1]);
  d.outputGateActivation = mps_act(a.gates[2]);
  NSArray<T>* r = [c.g GRUWithSourceTensor:in[0] recurrentWeight:in[1] inputWeight:in[2] bias:in[3] initState:in[4]
                                      mask:in[5] secondaryBias:in[6] descriptor:d name:nil];
  return conform_all(c, r, 1);
}

}  // namespace

void register_rnn_lowerings() {
  register_composite_lowering("single_gate_rnn", claim_always, lower_single);
  register_composite_lowering("lstm", claim_always, lower_lstm);
  register_composite_lowering("gru", claim_always, lower_gru);
}

}  // namespace mg::metal

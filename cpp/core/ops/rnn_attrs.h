// Typed attributes of the recurrent family (core/ops/rnn.cpp), as lowerings read them:
// typed_attrs<RNNAttrs>(node) (core/typed_attrs.h).
#pragma once

namespace mg::ops {

// MPSGraphRNNActivation's values.
enum class RNNActivation { None = 0, Relu = 1, Tanh = 2, Sigmoid = 3, HardSigmoid = 4 };

// single_gate_rnn, lstm, gru: the fields of MPSGraph's descriptors (those an op lacks keep their
// defaults). gates: lstm input, forget, cell, output; gru update, reset, output.
struct RNNAttrs {
  bool reverse = false;
  bool bidirectional = false;
  bool produce_cell = false;      // lstm
  bool forget_gate_last = false;  // lstm: gates [i, z, f, o] instead of [i, f, z, o]
  bool reset_gate_first = false;  // gru: gates [r, z, o] instead of [z, r, o]
  bool reset_after = false;       // gru
  bool flip_z = false;            // gru
  RNNActivation activation = RNNActivation::Tanh;  // single_gate_rnn: the cell's; lstm: g(c)
  RNNActivation gates[4] = {RNNActivation::Sigmoid, RNNActivation::Sigmoid, RNNActivation::Tanh,
                            RNNActivation::Sigmoid};
};

}  // namespace mg::ops

// Recurrent layers with MPSGraph's descriptors and semantics (MPSGraphRNNOps.h): single-gate
// RNN, LSTM and GRU. Each is a composite: Metal runs MPSGraph's op; elsewhere the node is
// expanded into its time steps (matmul + elementwise per step, the sequence length known at
// specialisation), and gradients are those of that expansion.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/ops/common.h"
#include "core/ops/rnn_attrs.h"

namespace mg::ops {

namespace {

enum class Cell { Single, LSTM, GRU };

int64_t gates_of(Cell k) { return k == Cell::Single ? 1 : k == Cell::LSTM ? 4 : 3; }
const char* name_of(Cell k) { return k == Cell::Single ? "single_gate_rnn" : k == Cell::LSTM ? "lstm" : "gru"; }

RNNActivation parse_activation(const std::string& s, bool* ok) {
  *ok = true;
  if (s == "none") return RNNActivation::None;
  if (s == "relu") return RNNActivation::Relu;
  if (s == "tanh") return RNNActivation::Tanh;
  if (s == "sigmoid") return RNNActivation::Sigmoid;
  if (s == "hard_sigmoid") return RNNActivation::HardSigmoid;
  *ok = false;
  return RNNActivation::None;
}
RNNActivation act(const Attrs& a, const char* name) {
  bool ok = true;
  return parse_activation(get_attr<std::string>(a, name), &ok);
}

const char* kGateActs[2][4] = {{"input_gate_activation", "forget_gate_activation", "cell_gate_activation",
                                "output_gate_activation"},
                               {"update_gate_activation", "reset_gate_activation", "output_gate_activation", ""}};

RNNAttrs decode_rnn_common(const Attrs& a) {
  RNNAttrs r;
  r.reverse = get_attr<bool>(a, "reverse");
  r.bidirectional = get_attr<bool>(a, "bidirectional");
  return r;
}
RNNAttrs decode_single(const Attrs& a) {
  RNNAttrs r = decode_rnn_common(a);
  r.activation = act(a, "activation");
  return r;
}
RNNAttrs decode_lstm(const Attrs& a) {
  RNNAttrs r = decode_rnn_common(a);
  r.produce_cell = get_attr<bool>(a, "produce_cell");
  r.forget_gate_last = get_attr<bool>(a, "forget_gate_last");
  r.activation = act(a, "activation");
  for (int i = 0; i < 4; ++i) r.gates[i] = act(a, kGateActs[0][i]);
  return r;
}
RNNAttrs decode_gru(const Attrs& a) {
  RNNAttrs r = decode_rnn_common(a);
  r.reset_gate_first = get_attr<bool>(a, "reset_gate_first");
  r.reset_after = get_attr<bool>(a, "reset_after");
  r.flip_z = get_attr<bool>(a, "flip_z");
  for (int i = 0; i < 3; ++i) r.gates[i] = act(a, kGateActs[1][i]);
  return r;
}

// Schema positions of the optional inputs (absent: -1).
struct Slots {
  int input_weight = 2, bias = 3, init_state = 4, init_cell = -1, mask = 5, peephole = -1, secondary_bias = -1;
};
Slots slots_of(Cell k) {
  Slots s;
  if (k == Cell::LSTM) {
    s.init_cell = 5;
    s.mask = 6;
    s.peephole = 7;
  } else if (k == Cell::GRU) {
    s.secondary_bias = 6;
  }
  return s;
}

bool dim_is(int64_t d, int64_t want) { return d < 0 || want < 0 || d == want; }

std::vector<TensorType> infer_rnn(InferCtx& c, Cell kind) {
  const std::vector<const char*> act_names =
      kind == Cell::Single ? std::vector<const char*>{"activation"}
      : kind == Cell::LSTM ? std::vector<const char*>{"activation", kGateActs[0][0], kGateActs[0][1], kGateActs[0][2],
                                                       kGateActs[0][3]}
                           : std::vector<const char*>{kGateActs[1][0], kGateActs[1][1], kGateActs[1][2]};
  for (const char* n : act_names) {
    bool ok = true;
    parse_activation(c.s(n), &ok);
    if (!ok) c.fail(ErrorKind::Value, std::string(n) + " must be 'none', 'relu', 'tanh', 'sigmoid' or 'hard_sigmoid', not '" + c.s(n) + "'");
  }
  require_class(c, 0, kFloat);
  const Slots sl = slots_of(kind);
  const int64_t G = gates_of(kind), D = c.b("bidirectional") ? 2 : 1;
  const Shape& x = c.in[0].shape;
  const Shape& R = c.in[1].shape;
  if (x.size() != 3) c.fail(ErrorKind::Value, "source must be (T, N, I), got " + type_str(c.in[0]));
  c.same_dtype(0, 1);
  if (R.size() != size_t(D == 2 ? 3 : 2) || (D == 2 && !dim_is(R[0], 2)))
    c.fail(ErrorKind::Value, std::string("recurrent_weight must be ") + (D == 2 ? "(2, G*H, H)" : "(G*H, H)") +
                                 " with G = " + std::to_string(G) + ", got " + shape_str(R));
  const int64_t H = R.back();  // may be unknown until specialisation: then so are the sizes made from it
  auto times = [](int64_t a, int64_t b) { return a < 0 || b < 0 ? int64_t(-1) : a * b; };
  const int64_t GH = times(G, H), DH = times(D, H), DGH = times(D, GH);
  if (!dim_is(R[R.size() - 2], GH))
    c.fail(ErrorKind::Value, "recurrent_weight " + shape_str(R) + " must have " + std::to_string(GH) + " rows (" +
                                 std::to_string(G) + " gates x hidden " + std::to_string(H) + ")");
  auto check = [&](int slot, const Shape& want, const char* what) {
    if (slot < 0 || !c.present(size_t(slot))) return;
    c.same_dtype(0, size_t(slot));
    const Shape& s = c.in[size_t(slot)].shape;
    bool ok = s.size() == want.size();
    for (size_t i = 0; ok && i < s.size(); ++i) ok = dim_is(s[i], want[i]);
    if (!ok) c.fail(ErrorKind::Value, std::string(what) + " must be " + shape_str(want) + ", got " + shape_str(s));
  };
  const int64_t N = x[1];
  if (c.present(size_t(sl.input_weight))) check(sl.input_weight, {DGH, x[2]}, "input_weight");
  else if (!dim_is(x[2], DGH))
    c.fail(ErrorKind::Value, "without input_weight the source's last dim must be " + std::to_string(DGH) +
                                 " (directions x gates x hidden), got " + shape_str(x));
  check(sl.bias, {DGH}, "bias");
  check(sl.init_state, {N, DH}, "init_state");
  check(sl.init_cell, {N, DH}, "init_cell");
  check(sl.secondary_bias, {DH}, "secondary_bias");
  if (sl.peephole >= 0) check(sl.peephole, D == 2 ? Shape{2, times(4, H)} : Shape{times(4, H)}, "peephole");
  if (c.present(size_t(sl.mask))) {
    c.same_dtype(0, size_t(sl.mask));
    const Shape& m = c.in[size_t(sl.mask)].shape;
    bool ok = m.size() <= 2 && (m.empty() || dim_is(m.back(), DH) || m.back() == 1);
    if (ok && m.size() == 2) ok = m[0] < 0 || m[0] == 1 || N < 0 || m[0] == N;
    if (!ok) c.fail(ErrorKind::Value, "mask " + shape_str(m) + " must broadcast to the state (N, " + std::to_string(DH) + ")");
  }
  TensorType out{c.in[0].dtype, {x[0], N, DH}};
  std::vector<TensorType> r{out};
  if (kind == Cell::LSTM && c.b("produce_cell")) r.push_back(out);
  return r;
}

// ---- the expansion: one set of ops per time step ----

ValueRef sl(Graph& g, ValueRef x, int64_t axis, int64_t start, int64_t len) {
  return call(g, "slice", {x}, {{"axis", axis}, {"start", start}, {"length", len}});
}
ValueRef sq0(Graph& g, ValueRef x) { return call(g, "squeeze", {x}, {{"axes", std::vector<int64_t>{0}}}); }
ValueRef mm(Graph& g, ValueRef a, ValueRef b) { return bin(g, "matrix_multiplication", a, b); }
ValueRef add(Graph& g, ValueRef a, ValueRef b) { return bin(g, "addition", a, b); }
ValueRef mul(Graph& g, ValueRef a, ValueRef b) { return bin(g, "multiplication", a, b); }

ValueRef activate(Graph& g, ValueRef x, RNNActivation a) {
  switch (a) {
    case RNNActivation::None: return x;
    case RNNActivation::Relu: return un(g, "relu", x);
    case RNNActivation::Tanh: return un(g, "tanh", x);
    case RNNActivation::Sigmoid: return un(g, "sigmoid", x);
    case RNNActivation::HardSigmoid:  // clamp(0.2 x + 0.5, 0, 1), as ONNX and Core ML
      return call(g, "clamp", {add(g, mul(g, x, k(g, 0.2, x)), k(g, 0.5, x)), k(g, 0.0, x), k(g, 1.0, x)});
  }
  return x;
}

struct Direction {
  ValueRef xw;     // (T, N, G*H): x W^T + b
  ValueRef rt;     // (H, G*H): R^T
  ValueRef h, c;   // states
  ValueRef mask, peephole, b2;
};

std::vector<ValueRef> expand_rnn(Graph& g, const std::vector<ValueRef>& in, const Attrs& attrs, Cell kind) {
  const RNNAttrs a = kind == Cell::Single ? decode_single(attrs) : kind == Cell::LSTM ? decode_lstm(attrs) : decode_gru(attrs);
  const Slots s = slots_of(kind);
  auto opt = [&](int slot) { return slot >= 0 && size_t(slot) < in.size() ? in[size_t(slot)] : ValueRef{}; };
  const Shape xs = g.type(in[0]).shape;
  const Shape rs = g.type(in[1]).shape;
  const int64_t T = xs[0], H = rs.back(), G = gates_of(kind), D = a.bidirectional ? 2 : 1, GH = G * H;
  if (T < 0 || H < 0)
    raise(ErrorKind::Value, name_of(kind), "",
          "the sequence length (dim 0 of source " + shape_str(xs) + ") and the hidden size (last dim of "
          "recurrent_weight " + shape_str(rs) + ") must be known to unroll the layer; gradients() unrolls it "
          "when called, so build the layer whose gradient is taken with placeholders of known T and H");
  if (T == 0) {
    if (xs[1] < 0) raise(ErrorKind::Value, name_of(kind), "", "an empty sequence needs a known batch, got " + shape_str(xs));
    ValueRef z = call(g, "zeros", {}, {{"shape", Shape{0, xs[1], D * H}}, {"dtype", g.type(in[0]).dtype}});
    return kind == Cell::LSTM && a.produce_cell ? std::vector<ValueRef>{z, z} : std::vector<ValueRef>{z};
  }
  const ValueRef W = opt(s.input_weight), B = opt(s.bias), H0 = opt(s.init_state), C0 = opt(s.init_cell),
                 M = opt(s.mask), P = opt(s.peephole), B2 = opt(s.secondary_bias);
  std::vector<ValueRef> dir_out, dir_cell;
  for (int64_t d = 0; d < D; ++d) {
    Direction st;
    ValueRef x = in[0];
    if (W.valid()) {
      ValueRef wt = call(g, "swap_axes", {D == 2 ? sl(g, W, 0, d * GH, GH) : W}, {{"axis1", int64_t(0)}, {"axis2", int64_t(1)}});
      st.xw = mm(g, x, wt);
    } else {
      st.xw = D == 2 ? sl(g, x, 2, d * GH, GH) : x;
    }
    if (B.valid()) st.xw = add(g, st.xw, D == 2 ? sl(g, B, 0, d * GH, GH) : B);
    ValueRef r = D == 2 ? sq0(g, sl(g, in[1], 0, d, 1)) : in[1];
    st.rt = call(g, "swap_axes", {r}, {{"axis1", int64_t(0)}, {"axis2", int64_t(1)}});
    auto per_dir = [&](ValueRef v, int64_t axis) { return v.valid() && D == 2 ? sl(g, v, axis, d * H, H) : v; };
    ValueRef zero = zeros_like(g, sl(g, sq0(g, sl(g, st.xw, 0, 0, 1)), 1, 0, H));
    st.h = H0.valid() ? per_dir(H0, 1) : zero;
    st.c = C0.valid() ? per_dir(C0, 1) : zero;
    if (M.valid()) {
      const Shape ms = g.type(M).shape;
      if (D == 2 && !ms.empty() && ms.back() < 0)
        raise(ErrorKind::Value, name_of(kind), "", "a bidirectional layer's mask needs a known last dim, got " + shape_str(ms));
      st.mask = !ms.empty() && ms.back() == D * H && D == 2 ? sl(g, M, int64_t(ms.size()) - 1, d * H, H) : M;
    }
    if (P.valid()) st.peephole = D == 2 ? sq0(g, sl(g, P, 0, d, 1)) : P;
    st.b2 = per_dir(B2, 0);
    // gate offsets within G*H
    const int64_t gi = 0, gf = a.forget_gate_last ? 2 : 1, gz = a.forget_gate_last ? 1 : 2, go = 3;
    const int64_t uz = a.reset_gate_first ? 1 : 0, ur = a.reset_gate_first ? 0 : 1, uo = 2;
    ValueRef rt_o = kind == Cell::GRU && !a.reset_after ? sl(g, st.rt, 1, uo * H, H) : ValueRef{};
    std::vector<ValueRef> hs(static_cast<size_t>(T)), cs(static_cast<size_t>(T));
    const bool backward = D == 2 ? d == 1 : a.reverse;
    for (int64_t step = 0; step < T; ++step) {
      const int64_t t = backward ? T - 1 - step : step;
      ValueRef xt = sq0(g, sl(g, st.xw, 0, t, 1));
      ValueRef hm = st.mask.valid() ? mul(g, st.h, st.mask) : st.h;
      ValueRef rec = mm(g, hm, st.rt);
      if (kind == Cell::Single) {
        st.h = activate(g, add(g, xt, rec), a.activation);
      } else if (kind == Cell::LSTM) {
        ValueRef pre = add(g, xt, rec);
        if (st.peephole.valid())
          pre = add(g, pre, mul(g, call(g, "concat", {st.c, st.c, st.c, st.c}, {{"axis", int64_t(1)}}), st.peephole));
        auto gate = [&](int64_t at, int which) { return activate(g, sl(g, pre, 1, at * H, H), a.gates[which]); };
        ValueRef i = gate(gi, 0), f = gate(gf, 1), z = gate(gz, 2), o = gate(go, 3);
        st.c = add(g, mul(g, f, st.c), mul(g, i, z));
        st.h = mul(g, o, activate(g, st.c, a.activation));
      } else {
        auto part = [&](ValueRef v, int64_t at) { return sl(g, v, 1, at * H, H); };
        ValueRef z = activate(g, add(g, part(rec, uz), part(xt, uz)), a.gates[0]);
        ValueRef rg = activate(g, add(g, part(rec, ur), part(xt, ur)), a.gates[1]);
        ValueRef cand;
        if (a.reset_after) {
          ValueRef ro = part(rec, uo);
          cand = mul(g, st.b2.valid() ? add(g, ro, st.b2) : ro, rg);
        } else {
          ValueRef hr = mul(g, st.h, rg);
          cand = mm(g, st.mask.valid() ? mul(g, hr, st.mask) : hr, rt_o);
        }
        ValueRef o = activate(g, add(g, cand, part(xt, uo)), a.gates[2]);
        ValueRef one_minus_z = bin(g, "subtraction", k(g, 1.0, z), z);
        st.h = a.flip_z ? add(g, mul(g, one_minus_z, st.h), mul(g, z, o)) : add(g, mul(g, z, st.h), mul(g, one_minus_z, o));
      }
      hs[size_t(t)] = st.h;
      cs[size_t(t)] = st.c;
    }
    dir_out.push_back(call(g, "stack", hs, {{"axis", int64_t(0)}}));
    if (kind == Cell::LSTM && a.produce_cell) dir_cell.push_back(call(g, "stack", cs, {{"axis", int64_t(0)}}));
  }
  auto join = [&](const std::vector<ValueRef>& v) {
    return v.size() == 1 ? v[0] : call(g, "concat", v, {{"axis", int64_t(2)}});
  };
  std::vector<ValueRef> out{join(dir_out)};
  if (!dir_cell.empty()) out.push_back(join(dir_cell));
  return out;
}

AttrSpec act_attr(const char* name, const char* def, const char* what) {
  return attr(name, AttrKind::String, std::string(def),
              std::string(what) + ": 'none', 'relu', 'tanh', 'sigmoid' or 'hard_sigmoid' (clamp(0.2 x + 0.5, 0, 1))");
}
std::vector<AttrSpec> common_attrs() {
  return {attr("reverse", AttrKind::Bool, false, "run the sequence backwards (outputs stay at their time steps); "
                                                 "ignored when bidirectional"),
          attr("bidirectional", AttrKind::Bool, false,
               "run both directions, concatenated on the channel axis (forward first)")};
}
std::vector<InputSpec> rnn_inputs(Cell kind) {
  std::vector<InputSpec> r{{"source"}, {"recurrent_weight"}, {"input_weight", false, true}, {"bias", false, true},
                           {"init_state", false, true}};
  if (kind == Cell::LSTM) r.push_back({"init_cell", false, true});
  r.push_back({"mask", false, true});
  if (kind == Cell::LSTM) r.push_back({"peephole", false, true});
  if (kind == Cell::GRU) r.push_back({"secondary_bias", false, true});
  return r;
}

const char* kShapesDoc =
    " Shapes (D = 2 when bidirectional, else 1; G gates): source (T, N, I); recurrent_weight (G*H, H), or (2, G*H, "
    "H) bidirectional; input_weight (D*G*H, I), absent: the source is already (T, N, D*G*H); bias (D*G*H); "
    "init_state (N, D*H), zeros when absent; mask broadcasts to (N, D*H) and multiplies the state where it enters "
    "the recurrent product (dropout). Result (T, N, D*H): the state at every step. The backward direction's "
    "state at t has read source[t:] (as PyTorch's). Weights are laid out as PyTorch's weight_ih / weight_hh. Any "
    "float dtype. Gradients: through the unrolled steps (the sequence length T and hidden size H must be known "
    "when gradients() is called).";

void register_rnn_op(Cell kind, std::string doc, std::vector<AttrSpec> extra, RNNAttrs (*decode)(const Attrs&)) {
  std::vector<AttrSpec> attrs = common_attrs();
  for (auto& a : extra) attrs.push_back(std::move(a));
  register_op({.name = name_of(kind),
               .doc = doc + kShapesDoc,
               .inputs = rnn_inputs(kind),
               .attrs = std::move(attrs),
               .decode = attr_decoder(decode),
               .infer = [kind](InferCtx& c) { return infer_rnn(c, kind); },
               .family = "rnn",
               .expand = [kind](Graph& g, const std::vector<ValueRef>& in, const Attrs& a) {
                 return expand_rnn(g, in, a, kind);
               }});
}

}  // namespace

void register_rnn_ops() {
  register_rnn_op(Cell::Single,
                  "A single-gate (Elman) RNN as MPSGraph's singleGateRNNWithSourceTensor: h[t] = activation(x[t] W^T + "
                  "(h[t-1] mask) R^T + b). G = 1.",
                  {act_attr("activation", "relu", "the cell's activation (MPSGraph's default relu)")}, decode_single);
  register_rnn_op(Cell::LSTM,
                  "An LSTM as MPSGraph's LSTMWithSourceTensor: [i, f, z, o] = gate activations of x[t] W^T + b + "
                  "(h[t-1] mask) R^T + peephole * c[t-1]; c[t] = f c[t-1] + i z; h[t] = o g(c[t]). The default gate "
                  "order [i, f, z, o] is PyTorch's [i, f, g, o] (pass bias = b_ih + b_hh). G = 4; init_cell (N, D*H); "
                  "peephole (4H), or (2, 4H) bidirectional, applied to c[t-1] for every gate as Apple documents. "
                  "Returns h, or (h, c) with produce_cell.",
                  {attr("produce_cell", AttrKind::Bool, false, "also return the cell state at every step"),
                   attr("forget_gate_last", AttrKind::Bool, false, "gate order [i, z, f, o] instead of [i, f, z, o]"),
                   act_attr("input_gate_activation", "sigmoid", "i's activation"),
                   act_attr("forget_gate_activation", "sigmoid", "f's activation"),
                   act_attr("cell_gate_activation", "tanh", "z's activation"),
                   act_attr("output_gate_activation", "sigmoid", "o's activation"),
                   act_attr("activation", "tanh", "g, applied to the cell for the output")},
                  decode_lstm);
  register_rnn_op(Cell::GRU,
                  "A GRU as MPSGraph's GRUWithSourceTensor: z, r = gate activations of x[t] W^T + b + (h[t-1] mask) "
                  "R^T; c = (h[t-1] r mask) R_o^T, or with reset_after ((h[t-1] mask) R_o^T + secondary_bias) r; o = "
                  "activation(c + (x[t] W^T + b)_o); h[t] = z h[t-1] + (1 - z) o (flip_z swaps z and 1 - z). "
                  "PyTorch's GRU is reset_gate_first=True, reset_after=True, bias = b_ih + [b_hr, b_hz, 0], "
                  "secondary_bias = b_hn. G = 3; secondary_bias (D*H).",
                  {attr("reset_gate_first", AttrKind::Bool, false, "gate order [r, z, o] instead of [z, r, o]"),
                   attr("reset_after", AttrKind::Bool, false, "apply the reset gate after the recurrent product"),
                   attr("flip_z", AttrKind::Bool, false, "h[t] = (1 - z) h[t-1] + z o instead of z h[t-1] + (1 - z) o"),
                   act_attr("update_gate_activation", "sigmoid", "z's activation"),
                   act_attr("reset_gate_activation", "sigmoid", "r's activation"),
                   act_attr("output_gate_activation", "tanh", "o's activation")},
                  decode_gru);
}

}  // namespace mg::ops

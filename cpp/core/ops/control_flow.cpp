// Control flow: if_then_else, while_loop, for_loop and the loops' gradient op.
//
// Every control-flow node lists its operands first (the predicate; the initial values; the
// loop bounds) and then the values each region captured, region by region; the attribute
// `region_captures` says how many belong to each region. Regions are sub-graphs
// (graph.h: Region) built once from the user's callables.
//
// Gradients: `if` differentiates each branch inside a new if (so gradients of gradients
// work). Loops differentiate through `while_loop_vjp`, which reruns the loop keeping each
// iteration's carried values (the tape; with checkpoint=True only every ~sqrt(n)-th, the
// rest recomputed) and then runs the bodies' vector-Jacobian products backwards.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/autodiff.h"
#include "core/control_flow.h"
#include "core/ops/common.h"

namespace mg {

std::vector<ValueRef> inline_region(Graph& dst, const Region& r, const std::vector<ValueRef>& feeds) {
  const Graph& body = *r.body;
  std::vector<std::vector<ValueRef>> map(body.size());
  for (size_t k = 0; k < r.feeds.size(); ++k) map[size_t(r.feeds[k])] = {feeds.at(k)};
  for (size_t id = 0; id < body.size(); ++id) {
    if (!map[id].empty()) continue;
    const Node& n = body.node(int32_t(id));
    std::vector<ValueRef> ins = schema_inputs(n);
    for (auto& v : ins)
      if (v.valid()) v = map[size_t(v.node)][size_t(v.index)];
    map[id] = dst.add(n.op->name, ins, n.attrs, "", n.regions);
    if (map[id].empty()) map[id].push_back({int32_t(dst.size()) - 1, 0});
  }
  std::vector<ValueRef> out;
  for (auto& v : r.results) out.push_back(map[size_t(v.node)][size_t(v.index)]);
  return out;
}

std::vector<TensorType> region_result_types(const Region& r, const std::vector<TensorType>& feed_types,
                                            const std::string& op, const std::string& node) {
  if (feed_types.size() != r.feeds.size())
    raise(ErrorKind::Value, op, node,
          "a region takes " + std::to_string(r.feeds.size()) + " values, got " + std::to_string(feed_types.size()));
  bool same = true;
  for (size_t k = 0; k < feed_types.size(); ++k) same = same && r.body->node(r.feeds[k]).outputs[0] == feed_types[k];
  if (same) return r.result_types();
  Graph scratch;
  std::vector<ValueRef> feeds;
  for (auto& t : feed_types) feeds.push_back(scratch.add1("placeholder", {}, {{"shape", t.shape}, {"dtype", t.dtype}}));
  std::vector<TensorType> out;
  for (auto& v : inline_region(scratch, r, feeds)) out.push_back(scratch.type(v));
  return out;
}

namespace ops {
namespace {

const std::vector<std::shared_ptr<const Region>>& regions_of(const InferCtx& c, size_t count) {
  if (!c.regions || c.regions->size() != count)
    c.fail(ErrorKind::Value, "needs " + std::to_string(count) + " regions; build it with its Graph method");
  return *c.regions;
}

// The captured values' types of region k, from the node's input types.
std::vector<TensorType> captures_of(const InferCtx& c, size_t leading, size_t k) {
  const auto& counts = c.ints("region_captures");
  size_t at = leading;
  for (size_t i = 0; i < k; ++i) at += size_t(counts.at(i));
  if (at + size_t(counts.at(k)) > c.in.size()) c.fail(ErrorKind::Value, "has fewer inputs than its regions capture");
  return {c.in.begin() + long(at), c.in.begin() + long(at + size_t(counts[k]))};
}

std::vector<TensorType> concat(std::vector<TensorType> a, const std::vector<TensorType>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

bool is_bool_scalar(const TensorType& t) {
  if (t.dtype != DType::Bool) return false;
  for (auto d : t.shape)
    if (d != 1) return false;
  return true;
}

// Two shapes of one value: equal where both are known.
bool shapes_agree(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] >= 0 && b[i] >= 0 && a[i] != b[i]) return false;
  return true;
}

// The loop-carried check: what the body returns must be what it was given.
void check_carried(const InferCtx& c, const std::vector<TensorType>& given, const std::vector<TensorType>& returned,
                   const std::string& block) {
  if (given.size() != returned.size())
    c.fail(ErrorKind::Value, "the " + block + " returns " + std::to_string(returned.size()) + " values for " +
                                 std::to_string(given.size()) + " loop-carried values");
  for (size_t k = 0; k < given.size(); ++k) {
    if (given[k].dtype != returned[k].dtype)
      c.fail(ErrorKind::Type, "loop-carried value " + std::to_string(k) + " changes dtype: " + type_str(given[k]) +
                                  " in, " + type_str(returned[k]) + " out of the " + block);
    if (!shapes_agree(given[k].shape, returned[k].shape))
      c.fail(ErrorKind::Value, "loop-carried value " + std::to_string(k) + " changes shape: " + type_str(given[k]) +
                                   " in, " + type_str(returned[k]) + " out of the " + block +
                                   " (a loop-carried value keeps its shape)");
  }
}

// ---- region_argument ----

std::vector<TensorType> infer_region_argument(InferCtx& c) { return {{c.dtype("dtype"), c.ints("shape")}}; }

// ---- if_then_else ----

std::vector<TensorType> infer_if_then_else(InferCtx& c) {
  const auto& r = regions_of(c, 2);
  if (c.in.empty() || !is_bool_scalar(c.in[0]))
    c.fail(ErrorKind::Type, "the predicate must be a bool scalar, got " + (c.in.empty() ? "nothing" : type_str(c.in[0])));
  auto then_t = region_result_types(*r[0], captures_of(c, 1, 0), c.op.name, c.node);
  auto else_t = region_result_types(*r[1], captures_of(c, 1, 1), c.op.name, c.node);
  if (then_t.size() != else_t.size())
    c.fail(ErrorKind::Value, "the then block returns " + std::to_string(then_t.size()) + " values, the else block " +
                                 std::to_string(else_t.size()));
  std::vector<TensorType> out;
  for (size_t k = 0; k < then_t.size(); ++k) {
    const TensorType &a = then_t[k], &b = else_t[k];
    if (a.dtype != b.dtype || !shapes_agree(a.shape, b.shape))
      c.fail(a.dtype != b.dtype ? ErrorKind::Type : ErrorKind::Value,
             "result " + std::to_string(k) + " differs between the branches: " + type_str(a) + " from then, " +
                 type_str(b) + " from else");
    TensorType m = a;
    for (size_t i = 0; i < m.shape.size(); ++i)
      if (m.shape[i] < 0) m.shape[i] = b.shape[i];
    out.push_back(m);
  }
  return out;
}

// A value's gradient from a map of contributions, given to the first input that is that
// value (a value captured twice must not be counted twice).
std::vector<ValueRef> by_first_input(const Node& node, const std::map<ValueRef, ValueRef>& grads) {
  std::vector<ValueRef> out;
  std::vector<ValueRef> seen;
  for (auto& in : node.inputs) {
    auto it = grads.find(in);
    bool first = std::find(seen.begin(), seen.end(), in) == seen.end();
    seen.push_back(in);
    out.push_back(it != grads.end() && first ? it->second : ValueRef{});
  }
  return out;
}

void add_grad(Graph& g, std::map<ValueRef, ValueRef>& grads, ValueRef v, ValueRef d) {
  if (!d.valid() || !is_inexact(g.type(v).dtype)) return;
  auto it = grads.find(v);
  if (it == grads.end()) grads[v] = d;
  else it->second = g.add1("addition", {it->second, d});
}

std::vector<ValueRef> grad_if_then_else(GradCtx& c) {
  Graph& g = c.g;
  const Node& node = c.node;
  const size_t k_then = size_t(get_attr<std::vector<int64_t>>(node.attrs, "region_captures").at(0));
  std::vector<ValueRef> caps_then(node.inputs.begin() + 1, node.inputs.begin() + 1 + long(k_then));
  std::vector<ValueRef> caps_else(node.inputs.begin() + 1 + long(k_then), node.inputs.end());
  // each branch returns the gradients of both branches' captures (zeros for the other's)
  auto branch = [&](const Region& r, bool is_then) {
    g.begin_region({}, "the gradient of " + node.name);
    const int32_t first = int32_t(g.size());
    const auto& own = is_then ? caps_then : caps_else;
    auto outs = inline_region(g, r, own);
    auto d = vjp(g, outs, c.dy, own, first);
    std::vector<ValueRef> results;
    for (int side = 0; side < 2; ++side) {
      const auto& caps = side == 0 ? caps_then : caps_else;
      for (size_t i = 0; i < caps.size(); ++i) {
        bool mine = (side == 0) == is_then;
        results.push_back(mine && d[i].valid() ? d[i] : zeros_like(g, caps[i]));
      }
    }
    return g.end_region(results);
  };
  auto then_g = branch(*node.regions[0], true);
  auto else_g = branch(*node.regions[1], false);
  auto d = build_if(g, c.x(0), then_g, else_g, node.name + "_grad");
  std::map<ValueRef, ValueRef> grads;
  for (size_t i = 0; i + 1 < node.inputs.size(); ++i) add_grad(g, grads, node.inputs[i + 1], d[i]);
  return by_first_input(node, grads);
}

// ---- while_loop ----

std::vector<TensorType> infer_while_loop(InferCtx& c) {
  const auto& r = regions_of(c, 2);
  const size_t n = size_t(c.i("num_initial"));
  std::vector<TensorType> init(c.in.begin(), c.in.begin() + long(std::min(n, c.in.size())));
  auto bt = region_result_types(*r[0], concat(init, captures_of(c, n, 0)), c.op.name, c.node);
  if (bt.empty() || !is_bool_scalar(bt[0]))
    c.fail(ErrorKind::Type, "the before block must return a bool scalar predicate first, got " +
                                (bt.empty() ? std::string("nothing") : type_str(bt[0])));
  std::vector<TensorType> passed(bt.begin() + 1, bt.end());
  auto at = region_result_types(*r[1], concat(passed, captures_of(c, n, 1)), c.op.name, c.node);
  check_carried(c, init, at, "after block");
  return passed;
}

// The vector-Jacobian regions of a while loop's blocks, accumulating the gradients of the
// captured values that need one (`wanted`; a large capture nobody differentiates, such as
// an input sequence read by index, then costs nothing per iteration):
//   before_vjp(x..., dz..., acc...) -> (dx..., acc + d wanted before_caps...)
//   after_vjp(z..., dx..., acc...)  -> (dz..., acc + d wanted after_caps...)
std::shared_ptr<Region> block_vjp(Graph& g, const Region& block, const std::vector<TensorType>& arg_types,
                                  const std::vector<ValueRef>& caps, const std::vector<char>& wanted,
                                  size_t skip_results, const std::string& what) {
  std::vector<TensorType> dres;
  auto rt = block.result_types();
  for (size_t k = skip_results; k < rt.size(); ++k) dres.push_back(rt[k]);
  std::vector<ValueRef> wcaps;
  for (size_t k = 0; k < caps.size(); ++k)
    if (wanted[k]) wcaps.push_back(caps[k]);
  std::vector<TensorType> acc_types;
  for (auto& v : wcaps) acc_types.push_back(g.type(v));
  const int32_t first = int32_t(g.size());
  auto args = g.begin_region(concat(concat(arg_types, dres), acc_types), what);
  std::vector<ValueRef> xs(args.begin(), args.begin() + long(arg_types.size()));
  std::vector<ValueRef> dys(args.begin() + long(arg_types.size()), args.begin() + long(arg_types.size() + dres.size()));
  std::vector<ValueRef> acc(args.begin() + long(arg_types.size() + dres.size()), args.end());
  std::vector<ValueRef> feeds = xs;
  feeds.insert(feeds.end(), caps.begin(), caps.end());
  auto outs = inline_region(g, block, feeds);
  std::vector<ValueRef> ys(outs.begin() + long(skip_results), outs.end());
  std::vector<ValueRef> wrt = xs;
  wrt.insert(wrt.end(), wcaps.begin(), wcaps.end());
  auto d = vjp(g, ys, dys, wrt, first);
  std::vector<ValueRef> results;
  for (size_t k = 0; k < xs.size(); ++k) results.push_back(d[k].valid() ? d[k] : zeros_like(g, xs[k]));
  for (size_t k = 0; k < wcaps.size(); ++k) {
    ValueRef dk = d[xs.size() + k];
    results.push_back(dk.valid() ? g.add1("addition", {acc[k], dk}) : acc[k]);
  }
  return g.end_region(results);
}

// Which captured values need a gradient: float ones the gradient asked for.
std::vector<char> wanted_captures(const GradCtx& c, const std::vector<ValueRef>& caps) {
  std::vector<char> w;
  for (auto& v : caps) {
    bool want = false;
    for (size_t i = 0; i < c.node.inputs.size(); ++i) want = want || (c.node.inputs[i] == v && c.wants(i));
    w.push_back(want && is_inexact(c.g.type(v).dtype));
  }
  return w;
}

// Gradients of a loop given as before/after regions with their captured values.
std::map<ValueRef, ValueRef> while_vjp(Graph& g, const std::vector<ValueRef>& initial,
                                       std::shared_ptr<const Region> before, const std::vector<ValueRef>& bcaps,
                                       const std::vector<char>& bwanted, std::shared_ptr<const Region> after,
                                       const std::vector<ValueRef>& acaps, const std::vector<char>& awanted,
                                       const std::vector<ValueRef>& dys, bool checkpoint, const std::string& name) {
  std::vector<TensorType> init_t;
  for (auto& v : initial) init_t.push_back(g.type(v));
  auto bt = before->result_types();
  std::vector<TensorType> passed(bt.begin() + 1, bt.end());
  auto bvjp = block_vjp(g, *before, init_t, bcaps, bwanted, 1, "the gradient of the before block of " + name);
  auto avjp = block_vjp(g, *after, passed, acaps, awanted, 0, "the gradient of the after block of " + name);
  std::vector<ValueRef> ins = initial;
  ins.insert(ins.end(), dys.begin(), dys.end());
  std::vector<int64_t> counts;
  for (auto* r : {before.get(), after.get(), (const Region*)bvjp.get(), (const Region*)avjp.get()}) {
    ins.insert(ins.end(), r->captures.begin(), r->captures.end());
    counts.push_back(int64_t(r->captures.size()));
  }
  std::vector<int64_t> wanted(bwanted.begin(), bwanted.end());
  wanted.insert(wanted.end(), awanted.begin(), awanted.end());
  auto outs = g.add("while_loop_vjp", ins,
                    {{"num_initial", int64_t(initial.size())}, {"region_captures", counts},
                     {"wanted_captures", wanted}, {"checkpoint", checkpoint}},
                    name + "_vjp", {before, after, bvjp, avjp});
  std::map<ValueRef, ValueRef> grads;
  size_t at = 0;
  for (size_t k = 0; k < initial.size(); ++k) add_grad(g, grads, initial[k], outs[at++]);
  for (size_t k = 0; k < bcaps.size(); ++k)
    if (bwanted[k]) add_grad(g, grads, bcaps[k], outs[at++]);
  for (size_t k = 0; k < acaps.size(); ++k)
    if (awanted[k]) add_grad(g, grads, acaps[k], outs[at++]);
  return grads;
}

std::vector<ValueRef> slice_refs(const std::vector<ValueRef>& v, size_t at, size_t n) {
  return {v.begin() + long(at), v.begin() + long(at + n)};
}

std::vector<ValueRef> grad_while_loop(GradCtx& c) {
  const Node& node = c.node;
  const size_t n = size_t(get_attr<int64_t>(node.attrs, "num_initial"));
  const auto& counts = get_attr<std::vector<int64_t>>(node.attrs, "region_captures");
  auto initial = slice_refs(node.inputs, 0, n);
  auto bcaps = slice_refs(node.inputs, n, size_t(counts[0]));
  auto acaps = slice_refs(node.inputs, n + size_t(counts[0]), size_t(counts[1]));
  auto grads = while_vjp(c.g, initial, node.regions[0], bcaps, wanted_captures(c, bcaps), node.regions[1], acaps,
                         wanted_captures(c, acaps), c.dy, get_attr<bool>(node.attrs, "checkpoint"), node.name);
  return by_first_input(node, grads);
}

// ---- for_loop ----

std::vector<TensorType> infer_for_loop(InferCtx& c) {
  const auto& r = regions_of(c, 1);
  const size_t n = size_t(c.i("num_initial"));
  if (c.in.size() < 3 + n) c.fail(ErrorKind::Value, "needs lower, upper and step and the initial values");
  const char* names[] = {"lower bound", "upper bound", "step"};
  for (size_t i = 0; i < 3; ++i)
    if (c.in[i].dtype != DType::Int32 || !c.in[i].shape.empty())
      c.fail(ErrorKind::Type, std::string("the ") + names[i] + " must be an int32 scalar, got " + type_str(c.in[i]));
  std::vector<TensorType> init(c.in.begin() + 3, c.in.begin() + 3 + long(n));
  std::vector<TensorType> args = {{DType::Int32, {}}};
  args.insert(args.end(), init.begin(), init.end());
  auto bt = region_result_types(*r[0], concat(args, captures_of(c, 3 + n, 0)), c.op.name, c.node);
  check_carried(c, init, bt, "body");
  return init;
}

// for i in range(lower, upper, step) as a while loop carrying i first:
//   before(i, xs) = (i < upper, i, xs); after(i, xs) = (i + step, body(i, xs))
std::vector<ValueRef> grad_for_loop(GradCtx& c) {
  Graph& g = c.g;
  const Node& node = c.node;
  const size_t n = size_t(get_attr<int64_t>(node.attrs, "num_initial"));
  const Region& body = *node.regions[0];
  ValueRef lower = c.x(0), upper = c.x(1), step = c.x(2);
  auto initial = slice_refs(node.inputs, 3, n);
  auto body_caps = slice_refs(node.inputs, 3 + n, node.inputs.size() - 3 - n);
  std::vector<TensorType> carried = {{DType::Int32, {}}};
  for (auto& v : initial) carried.push_back(g.type(v));

  auto bargs = g.begin_region(carried, "the before block of " + node.name);
  std::vector<ValueRef> bres = {g.add1("less_than", {bargs[0], upper})};
  bres.insert(bres.end(), bargs.begin(), bargs.end());
  auto before = g.end_region(bres);

  auto aargs = g.begin_region(carried, "the after block of " + node.name);
  std::vector<ValueRef> feeds = aargs;
  feeds.insert(feeds.end(), body_caps.begin(), body_caps.end());
  auto next = inline_region(g, body, feeds);
  std::vector<ValueRef> ares = {g.add1("addition", {aargs[0], step})};
  ares.insert(ares.end(), next.begin(), next.end());
  auto after = g.end_region(ares);

  std::vector<ValueRef> winit = {lower};
  winit.insert(winit.end(), initial.begin(), initial.end());
  std::vector<ValueRef> wdy = {zeros_like(g, lower)};
  wdy.insert(wdy.end(), c.dy.begin(), c.dy.end());
  auto grads = while_vjp(g, winit, before, before->captures, wanted_captures(c, before->captures), after,
                         after->captures, wanted_captures(c, after->captures), wdy,
                         get_attr<bool>(node.attrs, "checkpoint"), node.name);
  return by_first_input(node, grads);
}

// ---- while_loop_vjp ----

std::vector<TensorType> infer_while_loop_vjp(InferCtx& c) {
  regions_of(c, 4);
  const size_t n = size_t(c.i("num_initial"));
  const auto& flags = c.ints("wanted_captures");
  const size_t nb = size_t(c.ints("region_captures").at(0));
  std::vector<TensorType> out(c.in.begin(), c.in.begin() + long(n));
  auto m = c.regions->at(0)->results.size() - 1;
  for (size_t r = 0; r < 2; ++r) {
    auto wanted = wanted_entries(captures_of(c, n + m, r), flags, r == 0 ? 0 : nb);
    out.insert(out.end(), wanted.begin(), wanted.end());
  }
  return out;
}

// The same gradient from loops alone, recomputing states instead of keeping a tape (the
// CPU runs the op as one kernel; this is what differentiating it again, and backends without
// a kernel, use):
//   (x_n, n) = while (before's predicate on x) carrying (x, count): x <- step(x), count + 1
//   (dx, accb) = before_vjp(x_n, dy, 0)
//   for k in [0, n): i = n-1-k; x_i = for j in [0, i): step(x) from x_0; z_i = before(x_i)'s
//     passed values; (dz, acca) = after_vjp(z_i, dx, acca); (dx, accb) = before_vjp(x_i, dz, accb)
// where step(x) = after(before(x)'s passed values). Time O(n^2) iterations, memory O(1) states.
std::vector<ValueRef> expand_while_loop_vjp(Graph& g, const Node& node, const std::vector<ValueRef>& in) {
  const size_t n = size_t(get_attr<int64_t>(node.attrs, "num_initial"));
  const size_t m = node.regions[0]->results.size() - 1;
  const auto& counts = get_attr<std::vector<int64_t>>(node.attrs, "region_captures");
  const Region &before = *node.regions[0], &after = *node.regions[1], &bvjp = *node.regions[2],
               &avjp = *node.regions[3];
  auto init = slice_refs(in, 0, n), dys = slice_refs(in, n, m);
  std::vector<std::vector<ValueRef>> caps;
  size_t at = n + m;
  for (auto c : counts) {
    caps.push_back(slice_refs(in, at, size_t(c)));
    at += size_t(c);
  }
  auto join = [](std::initializer_list<const std::vector<ValueRef>*> parts) {
    std::vector<ValueRef> r;
    for (auto* p : parts) r.insert(r.end(), p->begin(), p->end());
    return r;
  };
  auto passed_of = [&](const std::vector<ValueRef>& x) {  // before(x)'s passed values
    auto outs = inline_region(g, before, join({&x, &caps[0]}));
    return std::vector<ValueRef>(outs.begin() + 1, outs.end());
  };
  auto step = [&](const std::vector<ValueRef>& x) {
    auto z = passed_of(x);
    return inline_region(g, after, join({&z, &caps[1]}));
  };
  std::vector<TensorType> xt;
  for (auto& v : init) xt.push_back(g.type(v));
  const TensorType count_t{DType::Int32, {}};
  auto with_count = [&](std::vector<TensorType> t) {
    t.push_back(count_t);
    return t;
  };
  const std::string name = node.name;

  // forward: the last state and the trip count
  auto bargs = g.begin_region(with_count(xt), "the before block of " + name + "'s trip count");
  std::vector<ValueRef> bx(bargs.begin(), bargs.end() - 1);
  std::vector<ValueRef> bres = {inline_region(g, before, join({&bx, &caps[0]}))[0]};
  bres.insert(bres.end(), bargs.begin(), bargs.end());
  auto count_before = g.end_region(bres);
  auto aargs = g.begin_region(with_count(xt), "the after block of " + name + "'s trip count");
  std::vector<ValueRef> ax(aargs.begin(), aargs.end() - 1);
  auto ares = step(ax);
  ares.push_back(g.add1("addition", {aargs.back(), g.scalar(1, DType::Int32)}));
  auto count_after = g.end_region(ares);
  std::vector<ValueRef> cinit = init;
  cinit.push_back(g.scalar(0, DType::Int32));
  auto fwd = build_while(g, cinit, count_before, count_after, name + "_trips", false);
  const ValueRef trips = fwd.back();
  std::vector<ValueRef> x_last(fwd.begin(), fwd.end() - 1);

  auto zeros_of = [&](const std::vector<ValueRef>& vs) {
    std::vector<ValueRef> r;
    for (auto& v : vs) r.push_back(zeros_like(g, v));
    return r;
  };
  const auto& flags = get_attr<std::vector<int64_t>>(node.attrs, "wanted_captures");
  auto accb0 = zeros_of(wanted_entries(caps[0], flags, 0)),
       acca0 = zeros_of(wanted_entries(caps[1], flags, caps[0].size()));
  auto first = inline_region(g, bvjp, join({&x_last, &dys, &accb0, &caps[2]}));  // (dx, accb)

  // backward: carried (dx, accb, acca)
  std::vector<TensorType> body_t = {count_t};
  for (auto* part : {&first, &acca0})
    for (auto& v : *part) body_t.push_back(g.type(v));
  auto args = g.begin_region(body_t, "the backward loop of " + name);
  const ValueRef k = args[0];
  std::vector<ValueRef> dx(args.begin() + 1, args.begin() + 1 + long(n));
  std::vector<ValueRef> accb(args.begin() + 1 + long(n), args.begin() + 1 + long(n + accb0.size()));
  std::vector<ValueRef> acca(args.begin() + 1 + long(n + accb0.size()), args.end());
  ValueRef i = g.add1("subtraction", {g.add1("subtraction", {trips, k}), g.scalar(1, DType::Int32)});
  std::vector<TensorType> index_and_x = {count_t};
  index_and_x.insert(index_and_x.end(), xt.begin(), xt.end());
  auto iargs = g.begin_region(index_and_x, "the state recomputation of " + name);
  auto inner = g.end_region(step(std::vector<ValueRef>(iargs.begin() + 1, iargs.end())));
  auto x_i = build_for(g, g.scalar(0, DType::Int32), i, g.scalar(1, DType::Int32), init, inner, name + "_state", false);
  auto z_i = passed_of(x_i);
  auto av = inline_region(g, avjp, join({&z_i, &dx, &acca, &caps[3]}));  // (dz, acca)
  std::vector<ValueRef> dz(av.begin(), av.begin() + long(m)), acca_next(av.begin() + long(m), av.end());
  auto bv = inline_region(g, bvjp, join({&x_i, &dz, &accb, &caps[2]}));  // (dx, accb)
  auto body = g.end_region(join({&bv, &acca_next}));
  auto carried_init = join({&first, &acca0});
  auto out = build_for(g, g.scalar(0, DType::Int32), trips, g.scalar(1, DType::Int32), carried_init, body,
                       name + "_backward", false);
  return out;
}

}  // namespace

void register_control_flow_ops() {
  const AttrSpec region_captures =
      attr("region_captures", AttrKind::Ints, std::vector<int64_t>{}, "values each region captured, region by region");
  const AttrSpec checkpoint = attr("checkpoint", AttrKind::Bool, false,
                                   "gradients recompute the loop's states from checkpoints instead of keeping "
                                   "every iteration's (memory O(sqrt(n)) instead of O(n), about one more forward pass)");
  register_op({.name = "region_argument",
               .doc = "An argument of a control-flow region while it is being built.",
               .attrs = {attr("shape", AttrKind::Shape), attr("dtype", AttrKind::DType)},
               .infer = infer_region_argument,
               .differentiable = Differentiable::No,
               .python_method = false,
               .family = "control_flow"});
  register_op({.name = "if_then_else",
               .doc = "Runs the then region where the bool scalar predicate is true, else the else region "
                      "(MPSGraph's ifWithPredicateTensor:thenBlock:elseBlock:). Both return values of the same "
                      "dtypes and ranks.",
               .inputs = {{"predicate", false, false, InputRole::Predicate}, {"captures", true}},
               .attrs = {region_captures},
               .infer = infer_if_then_else,
               .grad = grad_if_then_else,
               .python_method = false,
               .family = "control_flow"});
  register_op({.name = "while_loop",
               .doc = "MPSGraph's whileWithInitialInputs:before:after:. The before region takes the carried "
                      "values and returns a bool scalar and the values passed on; while it is true the after "
                      "region maps those to the next carried values; when false the passed values are the results.",
               .inputs = {{"operands", true}},
               .attrs = {attr("num_initial", AttrKind::Int), region_captures, checkpoint},
               .infer = infer_while_loop,
               .grad = grad_while_loop,
               .python_method = false,
               .family = "control_flow"});
  register_op({.name = "for_loop",
               .doc = "MPSGraph's forLoopWithLowerBound:upperBound:step:initialBodyArguments:body:: runs the body "
                      "for index = lower, lower + step, ... while index < upper, carrying its values.",
               .inputs = {{"operands", true}},
               .attrs = {attr("num_initial", AttrKind::Int), region_captures, checkpoint},
               .infer = infer_for_loop,
               .grad = grad_for_loop,
               .python_method = false,
               .family = "control_flow"});
  register_op({.name = "while_loop_vjp",
               .doc = "The gradient of a while loop: reruns it keeping the carried values of every iteration (or "
                      "checkpoints), then runs the blocks' vector-Jacobian products backwards. Gives the gradients "
                      "of the initial values and of the before and after blocks' captured values.",
               .inputs = {{"operands", true}},
               .attrs = {attr("num_initial", AttrKind::Int), region_captures,
                         attr("wanted_captures", AttrKind::Ints, std::vector<int64_t>{},
                              "per captured value of the before then the after block: 1 where its gradient is computed"),
                         checkpoint},
               .infer = infer_while_loop_vjp,
               .python_method = false,
               .family = "control_flow",
               .expand_node = expand_while_loop_vjp});
}

}  // namespace ops

// ---- builders ----

namespace {

std::vector<int64_t> capture_counts(const std::vector<const Region*>& rs) {
  std::vector<int64_t> r;
  for (auto* x : rs) r.push_back(int64_t(x->captures.size()));
  return r;
}

void append_captures(std::vector<ValueRef>& ins, const std::vector<const Region*>& rs) {
  for (auto* r : rs) ins.insert(ins.end(), r->captures.begin(), r->captures.end());
}

// Regions of a loop must not assign variables directly (the builders below rewrite assigns
// into carried values before making the node).
void refuse_assigns(const Region& r, const std::string& op, const std::string& name) {
  if (!r.assigned_variables.empty())
    raise(ErrorKind::NotImplemented, op, name, "assigning a variable inside this region is not supported");
}

ValueRef read_variable(Graph& g, int64_t var) {
  const auto vars = g.variables();
  TensorType t;
  {
    std::lock_guard<std::mutex> l(vars->mu);
    t = vars->slots.at(size_t(var)).type;
  }
  return g.add1("read_variable", {}, {{"variable", var}, {"dtype", t.dtype}, {"shape", t.shape}});
}

void assign_variable(Graph& g, int64_t var, ValueRef v) {
  const TensorType t = g.type(v);
  g.add("assign_variable", {v}, {{"variable", var}, {"dtype", t.dtype}, {"shape", t.shape}, {"follows_input", true}});
}

}  // namespace

namespace {

// Assigns the last vars.size() outputs to their variables (landing after the op) and
// returns the other outputs.
std::vector<ValueRef> assign_trailing(Graph& g, std::vector<ValueRef> outs, const std::vector<int64_t>& vars) {
  const size_t plain = outs.size() - vars.size();
  for (size_t k = 0; k < vars.size(); ++k) assign_variable(g, vars[k], outs[plain + k]);
  outs.resize(plain);
  return outs;
}

// A copy of region r that takes `extra` more arguments after its own and, with pass_extra,
// returns them after its results.
std::shared_ptr<Region> with_extra_args(Graph& g, const Region& r, const std::vector<TensorType>& extra,
                                        bool pass_extra, const std::string& what) {
  auto args = g.begin_region(ops::concat(r.arg_types(), extra), what);
  std::vector<ValueRef> feeds(args.begin(), args.begin() + long(r.num_args));
  feeds.insert(feeds.end(), r.captures.begin(), r.captures.end());
  auto res = inline_region(g, r, feeds);
  if (pass_extra) res.insert(res.end(), args.begin() + long(r.num_args), args.end());
  return g.end_region(res);
}

// The loop-carried form of variables assigned in a loop body: initial values (the values
// from before the run) appended to `initial`, and their types.
std::vector<TensorType> carry_variables(Graph& g, const std::vector<int64_t>& vars, std::vector<ValueRef>& initial) {
  std::vector<TensorType> types;
  for (auto v : vars) {
    initial.push_back(read_variable(g, v));
    types.push_back(g.type(initial.back()));
  }
  return types;
}

}  // namespace

std::vector<ValueRef> build_if(Graph& g, ValueRef predicate, std::shared_ptr<const Region> then_region,
                               std::shared_ptr<const Region> else_region, const std::string& name) {
  // variables assigned in either branch: the branch that does not assign returns the value
  // from before the run, and the assign lands after the if
  std::vector<int64_t> vars = then_region->assigned_variables;
  for (auto v : else_region->assigned_variables)
    if (std::find(vars.begin(), vars.end(), v) == vars.end()) vars.push_back(v);
  if (!vars.empty()) {
    // rebuild each branch returning, in `vars` order, its assigned value or the prior one
    auto rebuild = [&](const Region& r, const std::string& what) {
      g.begin_region({}, what);
      auto res = inline_region(g, r, r.captures);
      const size_t plain = r.results.size() - r.assigned_variables.size();
      std::vector<ValueRef> out(res.begin(), res.begin() + long(plain));
      for (auto var : vars) {
        auto it = std::find(r.assigned_variables.begin(), r.assigned_variables.end(), var);
        out.push_back(it == r.assigned_variables.end() ? read_variable(g, var)
                                                       : res[plain + size_t(it - r.assigned_variables.begin())]);
      }
      return g.end_region(out);
    };
    std::shared_ptr<const Region> t = rebuild(*then_region, "the then block of " + name);
    std::shared_ptr<const Region> e = rebuild(*else_region, "the else block of " + name);
    return assign_trailing(g, build_if(g, predicate, t, e, name), vars);
  }
  std::vector<ValueRef> ins = {predicate};
  append_captures(ins, {then_region.get(), else_region.get()});
  return g.add("if_then_else", ins, {{"region_captures", capture_counts({then_region.get(), else_region.get()})}},
               name, {then_region, else_region});
}

std::vector<ValueRef> build_while(Graph& g, const std::vector<ValueRef>& initial,
                                  std::shared_ptr<const Region> before, std::shared_ptr<const Region> after,
                                  const std::string& name, bool checkpoint) {
  refuse_assigns(*before, "while_loop", name);
  if (!after->assigned_variables.empty()) {
    // carry each assigned variable: it starts at the value from before the run, the after
    // block's assign replaces it, and the last one lands after the loop
    const auto& vars = after->assigned_variables;
    std::vector<ValueRef> init = initial;
    const auto var_types = carry_variables(g, vars, init);
    auto nb = with_extra_args(g, *before, var_types, true, "the before block of " + name);
    // the after block's results already end with the assigned values
    auto na = with_extra_args(g, *after, var_types, false, "the after block of " + name);
    return assign_trailing(g, build_while(g, init, nb, na, name, checkpoint), vars);
  }
  std::vector<ValueRef> ins = initial;
  append_captures(ins, {before.get(), after.get()});
  return g.add("while_loop", ins,
               {{"num_initial", int64_t(initial.size())},
                {"region_captures", capture_counts({before.get(), after.get()})},
                {"checkpoint", checkpoint}},
               name, {before, after});
}

std::vector<ValueRef> build_for(Graph& g, ValueRef lower, ValueRef upper, ValueRef step,
                                const std::vector<ValueRef>& initial, std::shared_ptr<const Region> body,
                                const std::string& name, bool checkpoint) {
  if (!body->assigned_variables.empty()) {
    const auto& vars = body->assigned_variables;
    std::vector<ValueRef> init = initial;
    auto nb = with_extra_args(g, *body, carry_variables(g, vars, init), false, "the body of " + name);
    return assign_trailing(g, build_for(g, lower, upper, step, init, nb, name, checkpoint), vars);
  }
  std::vector<ValueRef> ins = {lower, upper, step};
  ins.insert(ins.end(), initial.begin(), initial.end());
  append_captures(ins, {body.get()});
  return g.add("for_loop", ins,
               {{"num_initial", int64_t(initial.size())}, {"region_captures", capture_counts({body.get()})},
                {"checkpoint", checkpoint}},
               name, {body});
}

}  // namespace mg

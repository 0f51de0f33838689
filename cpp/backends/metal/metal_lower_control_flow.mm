// Control flow onto MPSGraph's own ops with blocks (all macOS 12.0):
//   if_then_else -> ifWithPredicateTensor:thenBlock:elseBlock:name:
//   while_loop   -> whileWithInitialInputs:before:after:name:
//   for_loop     -> forLoopWithLowerBound:upperBound:step:initialBodyArguments:body:name:
// Each region's body is specialised for the concrete types of its feeds (as the CPU kernels
// do) and lowered into its block by lower_graph, so nested control flow recurses. Captured
// values are tensors of the enclosing graph, used inside the blocks directly. Zero-size values
// (nil here) hold no data: they are left out of every block's arguments and results.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "backends/metal/metal_internal.h"
#include "core/specialise.h"

namespace mg::metal {

namespace {

bool is_empty(const TensorType& t) { return num_elements(t.shape) == 0; }

template <class T>
std::vector<T> slice(const std::vector<T>& v, size_t at, size_t n) {
  return {v.begin() + long(at), v.begin() + long(at + n)};
}

template <class T>
std::vector<T> cat(std::vector<T> a, const std::vector<T>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<size_t> non_empty(const std::vector<TensorType>& ts) {
  std::vector<size_t> r;
  for (size_t k = 0; k < ts.size(); ++k)
    if (!is_empty(ts[k])) r.push_back(k);
  return r;
}

// A region's body specialised for concrete feed types.
struct Body {
  Specialised sg;
  std::vector<TensorType> results;
};

// Specialises a region and checks, before any block runs, what lower_graph would refuse inside
// it (nested regions are checked when their own node is lowered).
std::shared_ptr<const Body> specialise_region(const LowerCtx& c, const Region& r, const std::vector<TensorType>& types,
                                              const std::string& what) {
  auto b = std::make_shared<Body>();
  b->sg = specialise(*r.body, r.feeds, types, r.results, {}, &c.evaluator());
  const Graph& g = *b->sg.graph;
  if (!b->sg.complete())
    c.fail(ErrorKind::NotImplemented, "the data-dependent op '" + g.node(b->sg.data_dependent[0]).op->name +
                                          "' inside its " + what + " is not implemented on the metal backend");
  validate_graph(g);
  for (size_t id = 0; id < g.size(); ++id) {
    const Node& n = g.node(int32_t(id));
    const std::string& op = n.op->name;
    if (op == "placeholder" || op == "constant") continue;
    if (n.op->stateful)  // one run counter per program: every iteration would draw the same numbers
      raise(ErrorKind::NotImplemented, op, n.name,
            "inside the " + what + " of " + c.op + " '" + c.node.name + "' is not implemented on the metal backend");
    if (!find_lowering(op)) raise(ErrorKind::NotImplemented, op, n.name, "is not implemented on the metal backend");
  }
  for (auto& v : b->sg.targets) b->results.push_back(g.type(v));
  return b;
}

void check_results(const LowerCtx& c, const std::vector<TensorType>& want, const std::vector<TensorType>& got,
                   const std::string& what) {
  if (want.size() != got.size())
    c.fail(ErrorKind::Runtime, "internal error: " + std::to_string(got.size()) + " " + what + "s for " +
                                   std::to_string(want.size()));
  for (size_t k = 0; k < want.size(); ++k)
    if (!(want[k] == got[k]))
      c.fail(ErrorKind::Value, what + " " + std::to_string(k) + " is " + type_str(got[k]) + " but must be " +
                                   type_str(want[k]));
}

// What the blocks of one control-flow node share. Blocks run while the selector is called; an
// error raised inside one is kept, the block returns stand-in tensors of the right types, and
// the error is rethrown once MPSGraph has returned.
struct BlockState {
  LowerEnv env;  // the region's: no variables, no run counter
  std::exception_ptr error;

  // A region's results (nil where zero-size; empty after an error).
  std::vector<MPSGraphTensor*> lower(const Body& b, const std::vector<MPSGraphTensor*>& feeds) {
    if (error) return {};
    try {
      LowerEnv e = env;
      e.placeholder = [&feeds](const Node&, size_t k) { return feeds.at(k); };
      return lower_graph(e, *b.sg.graph, b.sg.feeds, b.sg.targets);
    } catch (...) {
      error = std::current_exception();
      return {};
    }
  }
};

std::shared_ptr<BlockState> block_state(const LowerCtx& c) {
  if (!c.env) c.fail(ErrorKind::Runtime, "internal error: control flow lowered without its graph");
  auto st = std::make_shared<BlockState>();
  st->env.g = c.env->g;
  st->env.keep_alive = c.env->keep_alive;
  st->env.evaluator = c.env->evaluator;
  return st;
}

MPSGraphTensor* stand_in(MPSGraph* g, const TensorType& t) {
  return [g constantWithScalar:0.0 shape:mps_shape(t.shape) dataType:mps_dtype(t.dtype, "control flow", "")];
}

// A block argument pinned to its IR type's static shape (rank 0 as [1]).
MPSGraphTensor* pin(MPSGraph* g, MPSGraphTensor* x, const TensorType& t) {
  MPSShape* want = mps_shape(t.shape);
  if (x.shape && [x.shape isEqualToArray:want]) return x;
  return [g reshapeTensor:x withShape:want name:nil];
}

// A block's results: the non-empty values at `keep`, each through an identity made inside the
// block (a block may return a captured tensor or its own argument), or stand-ins after an error.
NSMutableArray<MPSGraphTensor*>* block_results(MPSGraph* g, const std::vector<MPSGraphTensor*>& vals, size_t offset,
                                               const std::vector<size_t>& keep, const std::vector<TensorType>& types) {
  NSMutableArray<MPSGraphTensor*>* r = [NSMutableArray arrayWithCapacity:keep.size()];
  for (size_t k : keep)
    [r addObject:vals.empty() ? stand_in(g, types[k]) : [g identityWithTensor:vals[offset + k] name:nil]];
  return r;
}

// Calls a control-flow selector; an error raised inside one of its blocks wins over whatever
// MPSGraph then raised about the stand-ins.
NSArray<MPSGraphTensor*>* call_selector(BlockState& st, NSArray<MPSGraphTensor*>* (^make)(void)) {
  NSArray<MPSGraphTensor*>* out = nil;
  @try {
    out = make();
  } @catch (NSException* e) {
    if (!st.error) @throw;
  }
  if (st.error) std::rethrow_exception(st.error);
  return out;
}

// The selector's results placed at the non-empty outputs.
std::vector<MPSGraphTensor*> place(const LowerCtx& c, NSArray<MPSGraphTensor*>* res, const std::vector<size_t>& keep) {
  if (res == nil || res.count != keep.size())
    c.fail(ErrorKind::Runtime, "internal error: MPSGraph returned " + std::to_string(res ? res.count : 0) +
                                   " results for " + std::to_string(keep.size()));
  std::vector<MPSGraphTensor*> outs(c.out_types.size(), nil);
  for (size_t j = 0; j < keep.size(); ++j) outs[keep[j]] = res[j];
  return outs;
}

std::vector<int64_t> capture_counts(const LowerCtx& c, size_t regions) {
  auto counts = node_attr<std::vector<int64_t>>(c.node, "region_captures");
  if (counts.size() != regions || c.node.regions.size() != regions)
    c.fail(ErrorKind::Runtime, "internal error: the node's regions do not match its captures");
  return counts;
}

// ---- if_then_else ----

std::vector<MPSGraphTensor*> lower_if(LowerCtx& c) {
  const auto counts = capture_counts(c, 2);
  const size_t nt = size_t(counts[0]), ne = size_t(counts[1]);
  const auto then_b = specialise_region(c, *c.node.regions[0], slice(c.in_types, 1, nt), "then block");
  const auto else_b = specialise_region(c, *c.node.regions[1], slice(c.in_types, 1 + nt, ne), "else block");
  check_results(c, c.out_types, then_b->results, "then result");
  check_results(c, c.out_types, else_b->results, "else result");
  const std::vector<TensorType> types = c.out_types;
  const std::vector<size_t> keep = non_empty(types);
  auto st = block_state(c);
  MPSGraph* g = c.g;
  auto branch = [&](std::shared_ptr<const Body> b, std::vector<MPSGraphTensor*> caps) -> MPSGraphIfThenElseBlock {
    return ^NSArray<MPSGraphTensor*>*(void) {
      return block_results(g, st->lower(*b, caps), 0, keep, types);
    };
  };
  MPSGraphIfThenElseBlock then_block = branch(then_b, slice(c.in, 1, nt));
  MPSGraphIfThenElseBlock else_block = branch(else_b, slice(c.in, 1 + nt, ne));
  MPSGraphTensor* pred = c.in[0];  // bool, shape [1]: "a single scalar value"
  return place(c, call_selector(*st, ^NSArray<MPSGraphTensor*>*(void) {
                 return [g ifWithPredicateTensor:pred thenBlock:then_block elseBlock:else_block name:nil];
               }),
               keep);
}

// ---- while_loop ----

std::vector<MPSGraphTensor*> lower_while(LowerCtx& c) {
  const auto counts = capture_counts(c, 2);
  const size_t n = size_t(node_attr<int64_t>(c.node, "num_initial"));
  const size_t nb = size_t(counts[0]), na = size_t(counts[1]);
  const std::vector<TensorType> init_t = slice(c.in_types, 0, n);
  const auto before = specialise_region(c, *c.node.regions[0], cat(init_t, slice(c.in_types, n, nb)), "before block");
  const std::vector<TensorType> passed_t = slice(before->results, 1, before->results.size() - 1);
  const auto after = specialise_region(c, *c.node.regions[1], cat(passed_t, slice(c.in_types, n + nb, na)), "after block");
  check_results(c, c.out_types, passed_t, "passed value");
  check_results(c, init_t, after->results, "loop-carried value");
  const std::vector<size_t> ci = non_empty(init_t), pi = non_empty(passed_t);
  MPSGraph* g = c.g;
  // With every carried value zero-size, MPSGraph still gets one to carry: an unused int32 [1].
  const bool dummy = ci.empty();
  NSMutableArray<MPSGraphTensor*>* initial = [NSMutableArray array];
  for (size_t k : ci) [initial addObject:c.in[k]];
  if (dummy) [initial addObject:c.k_int(0, DType::Int32)];
  auto st = block_state(c);
  const std::vector<MPSGraphTensor*> bcaps = slice(c.in, n, nb), acaps = slice(c.in, n + nb, na);
  MPSGraphWhileBeforeBlock before_block = ^MPSGraphTensor*(NSArray<MPSGraphTensor*>* inputs,
                                                            NSMutableArray<MPSGraphTensor*>* results) {
    std::vector<MPSGraphTensor*> feeds(n, nil);
    for (size_t j = 0; j < ci.size(); ++j) feeds[ci[j]] = pin(g, inputs[j], init_t[ci[j]]);
    auto vals = st->lower(*before, cat(feeds, bcaps));
    [results addObjectsFromArray:block_results(g, vals, 1, pi, passed_t)];
    return vals.empty() ? stand_in(g, {DType::Bool, {}}) : vals[0];  // bool, shape [1]
  };
  MPSGraphWhileAfterBlock after_block = ^NSArray<MPSGraphTensor*>*(NSArray<MPSGraphTensor*>* args) {
    std::vector<MPSGraphTensor*> feeds(passed_t.size(), nil);
    for (size_t j = 0; j < pi.size(); ++j) feeds[pi[j]] = pin(g, args[j], passed_t[pi[j]]);
    NSMutableArray<MPSGraphTensor*>* next = block_results(g, st->lower(*after, cat(feeds, acaps)), 0, ci, init_t);
    if (dummy) [next addObject:[g constantWithScalar:0.0 shape:@[ @1 ] dataType:MPSDataTypeInt32]];
    return next;
  };
  return place(c, call_selector(*st, ^NSArray<MPSGraphTensor*>*(void) {
                 return [g whileWithInitialInputs:initial before:before_block after:after_block name:nil];
               }),
               pi);
}

// ---- for_loop ----

std::vector<MPSGraphTensor*> lower_for(LowerCtx& c) {
  const auto counts = capture_counts(c, 1);
  const size_t n = size_t(node_attr<int64_t>(c.node, "num_initial"));
  const std::vector<TensorType> init_t = slice(c.in_types, 3, n);
  const TensorType index_t{DType::Int32, {}};
  const auto body = specialise_region(c, *c.node.regions[0],
                                      cat(cat({index_t}, init_t), slice(c.in_types, 3 + n, size_t(counts[0]))), "body");
  check_results(c, init_t, body->results, "loop-carried value");
  const std::vector<size_t> ci = non_empty(init_t);
  if (ci.empty()) return std::vector<MPSGraphTensor*>(n, nil);  // nothing to compute (outputs are zero-size)
  MPSGraph* g = c.g;
  // MPSGraph's step "must be positive": a step <= 0 runs no iteration here (the CPU raises where
  // lower < upper) rather than never ending on the GPU.
  MPSGraphTensor* lower = c.in[0];
  MPSGraphTensor* step = c.in[2];
  MPSGraphTensor* upper = c.sel(c.gt(step, c.k_int(0, DType::Int32)), c.in[1], lower);
  NSMutableArray<MPSGraphTensor*>* initial = [NSMutableArray array];
  for (size_t k : ci) [initial addObject:c.in[3 + k]];
  auto st = block_state(c);
  const std::vector<MPSGraphTensor*> caps = slice(c.in, 3 + n, size_t(counts[0]));
  MPSGraphForLoopBodyBlock body_block = ^NSArray<MPSGraphTensor*>*(MPSGraphTensor* index,
                                                                     NSArray<MPSGraphTensor*>* args) {
    MPSGraphTensor* i = index.dataType == MPSDataTypeInt32 ? index : [g castTensor:index toType:MPSDataTypeInt32 name:nil];
    std::vector<MPSGraphTensor*> feeds(1 + n, nil);
    feeds[0] = pin(g, i, index_t);
    for (size_t j = 0; j < ci.size(); ++j) feeds[1 + ci[j]] = pin(g, args[j], init_t[ci[j]]);
    return block_results(g, st->lower(*body, cat(feeds, caps)), 0, ci, init_t);
  };
  return place(c, call_selector(*st, ^NSArray<MPSGraphTensor*>*(void) {
                 return [g forLoopWithLowerBound:lower upperBound:upper step:step initialBodyArguments:initial
                                            body:body_block name:nil];
               }),
               ci);
}

}  // namespace

void register_control_flow_lowerings() {
  register_lowering("if_then_else", lower_if);
  register_lowering("while_loop", lower_while);
  register_lowering("for_loop", lower_for);
}

}  // namespace mg::metal

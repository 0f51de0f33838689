// Control-flow kernels (if_then_else, while_loop, for_loop, while_loop_vjp) written once for
// every backend that runs regions from the host. A backend supplies a policy P:
//   P::Runner(region, feed types): the region compiled once; .result_types(); .run(feeds, results)
//   P::owned(types)              : arrays of the backend's memory, owned by the kernel
//   P::copy(dst, src)            : copies values (ordered before later region runs)
//   P::predicate(array)          : reads a bool scalar on the host
//   P::read_i32(ptr)             : reads an int32 scalar on the host
//   P::set_index(array, i)       : writes an int32 scalar (the for-loop index)
//   P::zero(arrays)              : fills with zero bytes
// Each region is specialised for the concrete types its node was compiled with and compiled
// once, when the kernel is prepared; a run moves between preallocated buffers (ping-pong for
// loop-carried values), so iterations allocate nothing. Loop gradients keep a tape of carried
// values that grows to the longest trip count seen and is reused by later runs.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/array.h"
#include "core/control_flow.h"
#include "core/error.h"
#include "core/graph.h"
#include "core/registry.h"
#include "core/specialise.h"
#include "runtime/backend.h"

namespace mg::region_loops {

using Arrays = std::vector<std::shared_ptr<Array>>;
using HostFn = std::function<void(const void* const* in, void* const* out)>;


// Arrays of the given types over buffer(nbytes).
template <class MakeBuffer>
Arrays make_arrays(const std::vector<TensorType>& types, MakeBuffer buffer) {
  Arrays r;
  for (auto& t : types) {
    auto a = std::make_shared<Array>();
    a->dtype = t.dtype;
    a->shape = t.shape;
    a->buffer = buffer(nbytes_of(t));
    r.push_back(std::move(a));
  }
  return r;
}

// Arrays over the kernel's own input/output pointers (pointed anew on every run).
inline Arrays borrowed(const std::vector<TensorType>& types) {
  return make_arrays(types, [](size_t n) { return Buffer::borrow(nullptr, n, nullptr); });
}

inline void point(const Arrays& arrays, const void* const* ptrs) {
  for (size_t k = 0; k < arrays.size(); ++k) arrays[k]->buffer->data = const_cast<void*>(ptrs[k]);
}

// dst = the parts one after another; dst keeps its capacity, so on the run path this
// allocates only the first time.
inline const Arrays& fill(Arrays& dst, std::initializer_list<const Arrays*> parts) {
  dst.clear();
  for (auto* p : parts) dst.insert(dst.end(), p->begin(), p->end());
  return dst;
}

inline std::vector<TensorType> types_cat(std::initializer_list<std::vector<TensorType>> parts) {
  std::vector<TensorType> r;
  for (auto& p : parts) r.insert(r.end(), p.begin(), p.end());
  return r;
}

inline std::vector<TensorType> slice_types(const std::vector<TensorType>& v, size_t at, size_t n) {
  return {v.begin() + long(at), v.begin() + long(at + n)};
}

// The node's inputs split into its leading operands and each region's captured values.
struct Operands {
  std::vector<TensorType> leading;
  std::vector<std::vector<TensorType>> captures;
  std::vector<size_t> capture_at;  // input index of each region's first captured value
};

inline Operands split_operands(const Node& node, const std::vector<TensorType>& in, size_t leading) {
  Operands o;
  o.leading = slice_types(in, 0, leading);
  size_t at = leading;
  for (auto c : node_attr<std::vector<int64_t>>(node, "region_captures")) {
    o.capture_at.push_back(at);
    o.captures.push_back(slice_types(in, at, size_t(c)));
    at += size_t(c);
  }
  return o;
}

inline void check_same_types(const Node& node, const std::vector<TensorType>& want, const std::vector<TensorType>& got,
                             const std::string& what) {
  for (size_t k = 0; k < want.size(); ++k)
    if (!(want[k] == got[k]))
      raise(ErrorKind::Value, node.op->name, node.name,
            what + " " + std::to_string(k) + " is " + type_str(got[k]) + " but must stay " + type_str(want[k]) +
                " (a loop-carried value keeps its shape)");
}

// The region's body specialised for concrete feed types; refuses data-dependent ops inside.
inline Specialised specialise_region(const Region& r, const std::vector<TensorType>& feed_types,
                                     const std::function<bool(const Node&)>& implements_composite) {
  Specialised sg = specialise(*r.body, r.feeds, feed_types, r.results, {}, &host_constant_evaluator(),
                              implements_composite);
  if (!sg.complete()) {
    const Node& dd = sg.graph->node(sg.data_dependent.front());
    raise(ErrorKind::NotImplemented, dd.op->name, dd.name,
          "an op whose output size is known only after it runs is not supported inside a control-flow region "
          "(a loop-carried or returned value keeps its shape); compute it outside the region");
  }
  return sg;
}

// ---- if_then_else ----

template <class P>
HostFn make_if(const Node& node, const std::vector<TensorType>& in, const std::vector<TensorType>& out) {
  auto ops = split_operands(node, in, 1);
  struct State {
    std::unique_ptr<typename P::Runner> branch[2];
    Arrays pred, caps[2], out;
  };
  auto st = std::make_shared<State>();
  for (int b = 0; b < 2; ++b) {
    st->branch[b] = std::make_unique<typename P::Runner>(*node.regions[size_t(b)], ops.captures[size_t(b)]);
    st->caps[b] = borrowed(ops.captures[size_t(b)]);
    check_same_types(node, out, st->branch[b]->result_types(), b == 0 ? "then result" : "else result");
  }
  st->pred = borrowed({ops.leading[0]});
  st->out = borrowed(out);
  const size_t at[2] = {ops.capture_at[0], ops.capture_at[1]};
  return [st, at](const void* const* in, void* const* out) {
    point(st->pred, in);
    const int b = P::predicate(*st->pred[0]) ? 0 : 1;
    point(st->caps[b], in + at[b]);
    point(st->out, out);
    st->branch[b]->run(st->caps[b], st->out);
  };
}

// ---- while_loop ----

// A while loop's blocks compiled together, with the buffers one iteration needs.
template <class P>
struct WhileBlocks {
  std::unique_ptr<typename P::Runner> before, after;
  Arrays bcaps, acaps;  // borrowed
  Arrays passed;        // before's results: predicate, passed values
  Arrays z;             // the passed values alone
  Arrays after_feeds;   // z, then acaps
  Arrays before_feeds;  // scratch: x, then bcaps

  WhileBlocks(const Node& node, const Region& b, const Region& a, const std::vector<TensorType>& init,
              const std::vector<TensorType>& bcap_t, const std::vector<TensorType>& acap_t) {
    before = std::make_unique<typename P::Runner>(b, types_cat({init, bcap_t}));
    auto bt = before->result_types();
    after = std::make_unique<typename P::Runner>(a, types_cat({slice_types(bt, 1, bt.size() - 1), acap_t}));
    check_same_types(node, init, after->result_types(), "loop-carried value");
    bcaps = borrowed(bcap_t);
    acaps = borrowed(acap_t);
    passed = P::owned(bt);
    z.assign(passed.begin() + 1, passed.end());
    fill(after_feeds, {&z, &acaps});
  }
  // Runs before on x; false when the loop ends (passed values hold the results).
  bool test(const Arrays& x) {
    before->run(fill(before_feeds, {&x, &bcaps}), passed);
    return P::predicate(*passed[0]);
  }
  void step(const Arrays& next) { after->run(after_feeds, next); }
};

template <class P>
HostFn make_while(const Node& node, const std::vector<TensorType>& in, const std::vector<TensorType>& out) {
  const size_t n = size_t(node_attr<int64_t>(node, "num_initial"));
  auto ops = split_operands(node, in, n);
  struct State {
    std::unique_ptr<WhileBlocks<P>> blocks;
    Arrays x[2], init, out;
  };
  auto st = std::make_shared<State>();
  st->blocks = std::make_unique<WhileBlocks<P>>(node, *node.regions[0], *node.regions[1], ops.leading, ops.captures[0],
                                                ops.captures[1]);
  st->x[0] = P::owned(ops.leading);
  st->x[1] = P::owned(ops.leading);
  st->init = borrowed(ops.leading);
  st->out = borrowed(out);
  const size_t bat = ops.capture_at[0], aat = ops.capture_at[1];
  return [st, bat, aat](const void* const* in, void* const* out) {
    WhileBlocks<P>& w = *st->blocks;
    point(st->init, in);
    point(w.bcaps, in + bat);
    point(w.acaps, in + aat);
    point(st->out, out);
    P::copy(st->x[0], st->init);
    int cur = 0;
    while (w.test(st->x[cur])) {
      w.step(st->x[1 - cur]);
      cur ^= 1;
    }
    P::copy(st->out, w.z);
  };
}

// ---- for_loop ----

template <class P>
HostFn make_for(const Node& node, const std::vector<TensorType>& in, const std::vector<TensorType>& out) {
  const size_t n = size_t(node_attr<int64_t>(node, "num_initial"));
  auto ops = split_operands(node, in, 3 + n);
  auto init_t = slice_types(ops.leading, 3, n);
  struct State {
    std::unique_ptr<typename P::Runner> body;
    Arrays x[2], init, caps, out;
    Arrays feeds[2];  // index, x[b], caps
    std::shared_ptr<Array> index;
  };
  auto st = std::make_shared<State>();
  st->body = std::make_unique<typename P::Runner>(*node.regions[0],
                                                  types_cat({{TensorType{DType::Int32, {}}}, init_t, ops.captures[0]}));
  check_same_types(node, init_t, st->body->result_types(), "loop-carried value");
  st->x[0] = P::owned(init_t);
  st->x[1] = P::owned(init_t);
  st->init = borrowed(init_t);
  st->caps = borrowed(ops.captures[0]);
  st->out = borrowed(out);
  st->index = P::owned({TensorType{DType::Int32, {}}})[0];
  const Arrays index = {st->index};
  for (int b = 0; b < 2; ++b) fill(st->feeds[b], {&index, &st->x[b], &st->caps});
  const size_t cat_at = ops.capture_at[0];
  const std::string name = node.name;
  return [st, cat_at, name](const void* const* in, void* const* out) {
    const int64_t lower = P::read_i32(in[0]), upper = P::read_i32(in[1]), step = P::read_i32(in[2]);
    if (step <= 0 && lower < upper)
      raise(ErrorKind::Value, "for_loop", name, "step must be positive, got " + std::to_string(step));
    point(st->init, in + 3);
    point(st->caps, in + cat_at);
    point(st->out, out);
    P::copy(st->x[0], st->init);
    int cur = 0;
    for (int64_t i = lower; i < upper; i += step) {
      P::set_index(*st->index, int32_t(i));
      st->body->run(st->feeds[cur], st->x[1 - cur]);
      cur ^= 1;
    }
    P::copy(st->out, st->x[cur]);
  };
}

// ---- while_loop_vjp ----
//
// Forward: x_0 = initial; while before(x_i) is true: x_{i+1} = after(z_i). The results were
// z_n = before(x_n)'s passed values. Backward from dz_n = dy:
//   dx_n = before_vjp(x_n, dz_n); for i = n-1 .. 0: dz_i = after_vjp(z_i, dx_{i+1}),
//   dx_i = before_vjp(x_i, dz_i) (z_i recomputed from x_i); the blocks' vjps also add up
//   their captured values' gradients.
template <class P>
HostFn make_while_vjp(const Node& node, const std::vector<TensorType>& in, const std::vector<TensorType>& out) {
  const size_t n = size_t(node_attr<int64_t>(node, "num_initial"));
  const size_t m = node.regions[0]->results.size() - 1;
  auto ops = split_operands(node, in, n + m);
  auto init_t = slice_types(ops.leading, 0, n);
  auto dy_t = slice_types(ops.leading, n, m);
  const bool checkpoint = node_attr<bool>(node, "checkpoint");
  struct State {
    std::unique_ptr<WhileBlocks<P>> blocks;
    std::unique_ptr<typename P::Runner> bvjp, avjp;
    Arrays bvcaps, avcaps;
    std::vector<TensorType> init_t;
    std::vector<Arrays> tape;     // x_i (every one, or the checkpoints)
    std::vector<Arrays> segment;  // checkpoint mode: the states of one segment
    Arrays x[2], dz, dx[2], accb[2], acca[2], init, dy, out;
    Arrays feeds, results;  // scratch lists for the VJP regions' runs
    Arrays& tape_at(size_t i) {
      while (tape.size() <= i) tape.push_back(P::owned(init_t));
      return tape[i];
    }
  };
  auto st = std::make_shared<State>();
  st->init_t = init_t;
  st->blocks = std::make_unique<WhileBlocks<P>>(node, *node.regions[0], *node.regions[1], init_t, ops.captures[0],
                                                ops.captures[1]);
  auto passed_t = st->blocks->before->result_types();
  passed_t.erase(passed_t.begin());
  const auto& flags = node_attr<std::vector<int64_t>>(node, "wanted_captures");
  // the captured values whose gradients are accumulated
  const auto accb_t = wanted_entries(ops.captures[0], flags, 0),
             acca_t = wanted_entries(ops.captures[1], flags, ops.captures[0].size());
  st->bvjp = std::make_unique<typename P::Runner>(*node.regions[2], types_cat({init_t, dy_t, accb_t, ops.captures[2]}));
  st->avjp =
      std::make_unique<typename P::Runner>(*node.regions[3], types_cat({passed_t, init_t, acca_t, ops.captures[3]}));
  st->bvcaps = borrowed(ops.captures[2]);
  st->avcaps = borrowed(ops.captures[3]);
  for (int k = 0; k < 2; ++k) {
    st->x[k] = P::owned(init_t);
    st->dx[k] = P::owned(init_t);
    st->accb[k] = P::owned(accb_t);
    st->acca[k] = P::owned(acca_t);
  }
  st->dz = P::owned(dy_t);
  st->init = borrowed(init_t);
  st->dy = borrowed(dy_t);
  st->out = borrowed(out);
  const size_t at[4] = {ops.capture_at[0], ops.capture_at[1], ops.capture_at[2], ops.capture_at[3]};
  return [st, at, n, checkpoint](const void* const* in, void* const* out) {
    WhileBlocks<P>& w = *st->blocks;
    point(w.bcaps, in + at[0]);
    point(w.acaps, in + at[1]);
    point(st->bvcaps, in + at[2]);
    point(st->avcaps, in + at[3]);
    point(st->dy, in + n);
    point(st->out, out);
    point(st->init, in);
    const Arrays& init = st->init;

    // forward: the tape of carried values (checkpoint mode: count the trips first, then keep
    // every k-th state, k = ceil(sqrt(trips + 1)))
    size_t trips = 0, every = 1;
    if (!checkpoint) {
      P::copy(st->tape_at(0), init);
      while (w.test(st->tape_at(trips))) {
        w.step(st->tape_at(trips + 1));
        ++trips;
      }
    } else {
      P::copy(st->x[0], init);
      for (int cur = 0; w.test(st->x[cur]); cur ^= 1, ++trips) w.step(st->x[1 - cur]);
      every = size_t(std::ceil(std::sqrt(double(trips + 1))));
      for (size_t i = 0; i < trips / every + 1; ++i) st->tape_at(i);  // no reallocation below
      P::copy(st->tape[0], init);
      const Arrays* cur = &st->tape[0];
      int flip = 0;
      for (size_t i = 0; i < trips; ++i) {
        w.test(*cur);
        const bool keep = (i + 1) % every == 0;
        const Arrays* next = keep ? &st->tape[(i + 1) / every] : &st->x[flip];
        if (!keep) flip ^= 1;
        w.step(*next);
        cur = next;
      }
    }
    // the states of the segment holding i (checkpoint mode), recomputed on first use
    size_t seg_base = size_t(-1);
    auto state = [&](size_t i) -> const Arrays& {
      if (every == 1) return st->tape[i];
      const size_t base = i / every * every;
      if (base != seg_base) {
        while (st->segment.size() < every) st->segment.push_back(P::owned(st->init_t));
        P::copy(st->segment[0], st->tape[base / every]);
        for (size_t j = 1; j < every && base + j <= trips; ++j) {
          w.test(st->segment[j - 1]);
          w.step(st->segment[j]);
        }
        seg_base = base;
      }
      return st->segment[i - base];
    };

    // backward
    P::zero(st->accb[0]);
    P::zero(st->acca[0]);
    P::copy(st->dz, st->dy);
    int cx = 0, cb = 0, ca = 0;
    auto before_vjp = [&](const Arrays& x) {
      st->bvjp->run(fill(st->feeds, {&x, &st->dz, &st->accb[cb], &st->bvcaps}),
                    fill(st->results, {&st->dx[1 - cx], &st->accb[1 - cb]}));
      cx ^= 1;
      cb ^= 1;
    };
    before_vjp(state(trips));
    for (size_t i = trips; i-- > 0;) {
      const Arrays& x = state(i);
      w.test(x);  // z_i
      st->avjp->run(fill(st->feeds, {&w.z, &st->dx[cx], &st->acca[ca], &st->avcaps}),
                    fill(st->results, {&st->dz, &st->acca[1 - ca]}));
      ca ^= 1;
      before_vjp(x);
    }
    P::copy(st->out, fill(st->results, {&st->dx[cx], &st->accb[cb], &st->acca[ca]}));
  };
}

}  // namespace mg::region_loops

#include "core/channels_last.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/array.h"
#include "core/registry.h"
#include "core/shape.h"
#include "core/typed_attrs.h"

namespace mg {

namespace {

const Shape kToLast{0, 2, 3, 1}, kToFirst{0, 3, 1, 2};

// Which way a plan moves values: a held value is one whose buffer keeps it permuted, the value
// being transpose(held buffer, back); fwd is the inverse permutation.
struct Direction {
  Shape fwd, back;
  bool nhwc_kernels;  // channels-last: convolutions chosen to run NHWC, pools on NHWC values
  const char* to_plain;  // name suffixes of the transposes the plan adds
  const char* operand;
};
const Direction kChannelsLast{kToLast, kToFirst, true, "/to_nchw", "/operand_nhwc"};
const Direction kChannelsFirst{kToFirst, kToLast, false, "/back_to_nhwc", "/operand_nchw"};

// A source value in the planned graph: `v` itself, or (held) v holds it permuted, i.e. the
// value is transpose(v, direction.back).
struct Rep {
  ValueRef v;
  bool held = false;
};

bool is_transpose(const Node& n, const Shape& perm) {
  if (n.op->name != "transpose" || n.outputs.size() != 1 || n.outputs[0].shape.size() != 4) return false;
  const auto it = n.attrs.find("permutation");
  const auto* p = it == n.attrs.end() ? nullptr : std::get_if<std::vector<int64_t>>(&it->second);
  return p && *p == perm;
}

// 2-D pooling whose windows the NHWC value can take as 3-D windows over (H, W, C), one channel
// wide: the same taps in the same order, so the same values (max, avg and sum; not the indices,
// which count positions in a channel's plane)
bool pools_channels_last(const Graph& g, const Node& n) {
  const std::string& op = n.op->name;
  if (op != "max_pooling_nd" && op != "avg_pooling_nd" && op != "sum_pooling_nd") return false;
  const auto it = n.attrs.find("kernel_sizes");
  return it != n.attrs.end() && std::get<std::vector<int64_t>>(it->second).size() == 2 && g.type(n.inputs[0]).shape.size() == 4;
}

Attrs with_channel_dim(Attrs a) {
  auto grow = [&](const char* name, std::initializer_list<int64_t> more) {
    auto it = a.find(name);
    if (it == a.end()) return;
    std::vector<int64_t> v = std::get<std::vector<int64_t>>(it->second);
    v.insert(v.end(), more);
    it->second = v;
  };
  grow("kernel_sizes", {1});
  grow("strides", {1});
  grow("dilation_rates", {1});
  grow("padding", {0, 0});
  return a;
}

// `a` transposed by `perm` (dim i of the result is dim perm[i] of a), on the host.
std::shared_ptr<const Array> permuted(const Array& a, const Shape& perm) {
  Shape shape;
  for (int64_t p : perm) shape.push_back(a.shape[size_t(p)]);
  auto r = Array::empty(a.dtype, shape);
  const std::vector<int64_t> from = contiguous_strides(a.shape);
  const size_t es = dtype_size(a.dtype), rank = shape.size();
  std::vector<int64_t> idx(rank, 0);
  const auto* s = static_cast<const unsigned char*>(a.data());
  auto* d = static_cast<unsigned char*>(r->data());
  for (int64_t i = 0, n = num_elements(shape); i < n; ++i) {
    int64_t off = 0;
    for (size_t k = 0; k < rank; ++k) off += idx[k] * from[size_t(perm[k])];
    std::memcpy(d + size_t(i) * es, s + size_t(off) * es, es);
    for (size_t k = rank; k-- > 0;) {
      if (++idx[k] < shape[k]) break;
      idx[k] = 0;
    }
  }
  return r;
}

bool is_chosen(const Graph& g, const Node& n, const std::function<bool(const Node&)>& wants) {
  return n.op->name == "convolution" && n.outputs.size() == 1 && n.outputs[0].shape.size() == 4 &&
         g.type(n.inputs[0]).shape.size() == 4 && wants(n);
}

}  // namespace

namespace {

Specialised plan(const Specialised& sg, const Direction& dir, const std::function<bool(const Node&)>& wants,
                 bool weights_ohwi) {
  const Graph& src = *sg.graph;
  if (!sg.complete()) return sg;
  bool any = false;
  for (size_t id = 0; id < src.size(); ++id) {
    const Node& n = src.node(int32_t(id));
    if (!n.regions.empty()) return sg;
    any = any || (dir.nhwc_kernels ? is_chosen(src, n, wants) : is_transpose(n, dir.back));
  }
  if (!any) return sg;

  Specialised out;
  out.graph = std::make_shared<Graph>();
  out.vars = sg.vars;
  out.evaluator = sg.evaluator;
  out.feeds.assign(sg.feeds.size(), -1);
  Graph& dst = *out.graph;
  std::vector<std::vector<Rep>> map(src.size());
  std::map<ValueRef, ValueRef> first_of;  // a held value -> the transpose made for its other readers

  auto transpose = [&](ValueRef v, const Shape& perm, const std::string& name) {
    return dst.add1("transpose", {v}, {{"permutation", perm}}, name);
  };
  auto reshape = [&](ValueRef v, const Shape& shape, const std::string& name) {
    return dst.add1("reshape", {v}, {{"shape", shape}}, name);
  };
  auto canonical = [&](const Rep& r, const std::string& name) {
    if (!r.held) return r.v;
    auto it = first_of.find(r.v);
    if (it != first_of.end()) return it->second;
    const ValueRef t = transpose(r.v, dir.back, name + dir.to_plain);
    first_of[r.v] = t;
    return t;
  };
  auto rep_of = [&](ValueRef v) { return map[size_t(v.node)].at(size_t(v.index)); };
  auto copy = [&](const Node& s, const std::vector<ValueRef>& inputs, bool retype) {
    Node d = copy_with_inputs(s, inputs);
    if (retype) {
      std::vector<TensorType> in;
      for (auto& v : inputs) in.push_back(dst.type(v));
      infer_again(d, in);
    }
    const int32_t id = dst.append(std::move(d));
    std::vector<Rep> r;
    for (size_t k = 0; k < dst.node(id).outputs.size(); ++k) r.push_back({{id, int32_t(k)}, false});
    if (r.empty()) r.push_back({{id, 0}, false});  // keeps the id for target ops
    return r;
  };

  for (size_t id = 0; id < src.size(); ++id) {
    const Node& s = src.node(int32_t(id));
    if (dir.nhwc_kernels && is_chosen(src, s, wants)) {
      const Rep x = rep_of(s.inputs[0]);
      // a transpose of its own, so that the convolution is its only reader (and reads NHWC)
      const ValueRef xin = x.held ? transpose(x.v, kToFirst, s.name + "/from_nhwc") : x.v;
      ValueRef w = canonical(rep_of(s.inputs[1]), s.name);
      const Node& wn = dst.node(w.node);
      if (weights_ohwi && wn.op->name == "constant" && wn.outputs.size() == 1 && wn.outputs[0].shape.size() == 4) {
        Node c = wn;
        c.name = s.name + "/weights_ohwi";
        const auto value = permuted(*std::get<std::shared_ptr<const Array>>(wn.attrs.at("value")), kToLast);
        c.attrs["value"] = value;
        c.outputs = {{value->dtype, value->shape}};
        w = transpose({dst.append(std::move(c)), 0}, kToFirst, s.name + "/weights_from_ohwi");
      }
      const std::vector<Rep> y = copy(s, {xin, w}, false);
      map[id] = {{transpose(y[0].v, kToLast, s.name + "/to_nhwc"), true}};
      continue;
    }
    // the graph's own transposes meet the plan's: `back` of a plain value is that value held,
    // `fwd` of a held value is its buffer (e.g. an NHWC graph's transposes around convolutions)
    if (is_transpose(s, dir.back) && !rep_of(s.inputs[0]).held) {
      map[id] = {{rep_of(s.inputs[0]).v, true}};
      continue;
    }
    if (is_transpose(s, dir.fwd) && rep_of(s.inputs[0]).held) {
      map[id] = {{rep_of(s.inputs[0]).v, false}};
      continue;
    }
    if (dir.nhwc_kernels && pools_channels_last(src, s) && rep_of(s.inputs[0]).held) {
      Node nhwc = s;
      nhwc.attrs = with_channel_dim(s.attrs);
      map[id] = copy(nhwc, {rep_of(s.inputs[0]).v}, true);
      map[id][0].held = true;
      continue;
    }
    bool takes_held = s.op->family == "elementwise" && s.outputs.size() == 1 && s.outputs[0].shape.size() == 4;
    bool reads_held = false;
    for (auto& v : s.inputs) {
      takes_held = takes_held && src.type(v).shape.size() <= 4;
      reads_held = reads_held || rep_of(v).held;
    }
    if (takes_held && reads_held) {
      // the op on held values: each operand as it broadcasts against the held order
      std::vector<ValueRef> in;
      for (auto& v : s.inputs) {
        const Rep r = rep_of(v);
        const Shape& cs = src.type(v).shape;
        if (r.held || num_elements(cs) == 1) {
          in.push_back(r.v);
          continue;
        }
        Shape s4(4 - cs.size(), 1);
        s4.insert(s4.end(), cs.begin(), cs.end());
        Shape held;
        std::vector<int64_t> order;  // the dims that are not 1, in held order
        for (int64_t d : dir.fwd) {
          held.push_back(s4[size_t(d)]);
          if (s4[size_t(d)] != 1) order.push_back(d);
        }
        // a reshape where the permutation keeps the bytes' order (e.g. a per-channel row)
        if (std::is_sorted(order.begin(), order.end())) in.push_back(reshape(r.v, held, s.name + dir.operand));
        else in.push_back(transpose(cs.size() == 4 ? r.v : reshape(r.v, s4, s.name + "/operand_4d"), dir.fwd, s.name + dir.operand));
      }
      map[id] = copy(s, in, true);
      map[id][0].held = true;
      continue;
    }
    std::vector<ValueRef> in;
    for (auto& v : s.inputs) in.push_back(canonical(rep_of(v), s.name));
    map[id] = copy(s, in, false);
    if (s.op->name == "placeholder")
      for (size_t f = 0; f < sg.feeds.size(); ++f)
        if (sg.feeds[f] == int32_t(id)) out.feeds[f] = map[id][0].v.node;
  }
  for (auto& t : sg.targets) out.targets.push_back(canonical(rep_of(t), src.node(t.node).name));
  for (int32_t t : sg.target_ops) out.target_ops.push_back(map[size_t(t)][0].v.node);
  return out;
}

}  // namespace

Specialised plan_channels_last(const Specialised& sg, const std::function<bool(const Node&)>& wants,
                               bool weights_ohwi) {
  return plan(sg, kChannelsLast, wants, weights_ohwi);
}

Specialised plan_channels_first(const Specialised& sg) {
  return plan(sg, kChannelsFirst, [](const Node&) { return false; }, false);
}

}  // namespace mg

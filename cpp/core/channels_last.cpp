#include "core/channels_last.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/registry.h"
#include "core/shape.h"
#include "core/typed_attrs.h"

namespace mg {

namespace {

const Shape kToLast{0, 2, 3, 1}, kToFirst{0, 3, 1, 2};

// A source value in the planned graph: `v` itself, or (last) v holds it NHWC, i.e. the value
// is transpose(v, kToFirst).
struct Rep {
  ValueRef v;
  bool last = false;
};

bool is_chosen(const Graph& g, const Node& n, const std::function<bool(const Node&)>& wants) {
  return n.op->name == "convolution" && n.outputs.size() == 1 && n.outputs[0].shape.size() == 4 &&
         g.type(n.inputs[0]).shape.size() == 4 && wants(n);
}

}  // namespace

Specialised plan_channels_last(const Specialised& sg, const std::function<bool(const Node&)>& wants) {
  const Graph& src = *sg.graph;
  if (!sg.complete()) return sg;
  bool any = false;
  for (size_t id = 0; id < src.size(); ++id) {
    const Node& n = src.node(int32_t(id));
    if (!n.regions.empty()) return sg;
    any = any || is_chosen(src, n, wants);
  }
  if (!any) return sg;

  Specialised out;
  out.graph = std::make_shared<Graph>();
  out.vars = sg.vars;
  out.evaluator = sg.evaluator;
  out.feeds.assign(sg.feeds.size(), -1);
  Graph& dst = *out.graph;
  std::vector<std::vector<Rep>> map(src.size());
  std::map<ValueRef, ValueRef> first_of;  // an NHWC value -> the NCHW transpose made for its other readers

  auto transpose = [&](ValueRef v, const Shape& perm, const std::string& name) {
    return dst.add1("transpose", {v}, {{"permutation", perm}}, name);
  };
  auto reshape = [&](ValueRef v, const Shape& shape, const std::string& name) {
    return dst.add1("reshape", {v}, {{"shape", shape}}, name);
  };
  auto canonical = [&](const Rep& r, const std::string& name) {
    if (!r.last) return r.v;
    auto it = first_of.find(r.v);
    if (it != first_of.end()) return it->second;
    const ValueRef t = transpose(r.v, kToFirst, name + "/to_nchw");
    first_of[r.v] = t;
    return t;
  };
  auto rep_of = [&](ValueRef v) { return map[size_t(v.node)].at(size_t(v.index)); };
  auto copy = [&](const Node& s, const std::vector<ValueRef>& inputs, bool infer_again) {
    Node d;
    d.op = s.op;
    d.name = s.name;
    d.attrs = s.attrs;
    d.absent = s.absent;
    d.origin_op = s.origin_op;
    d.origin_name = s.origin_name;
    d.inputs = inputs;
    d.outputs = s.outputs;
    d.decoded = s.decoded;
    if (infer_again) {
      std::vector<TensorType> in;
      for (auto& v : inputs) in.push_back(dst.type(v));
      InferCtx ctx(*d.op, d.name, in, d.attrs);
      ctx.absent = d.absent;
      d.outputs = d.op->infer(ctx);
      decode_attrs(d);
    }
    const int32_t id = dst.append(std::move(d));
    std::vector<Rep> r;
    for (size_t k = 0; k < dst.node(id).outputs.size(); ++k) r.push_back({{id, int32_t(k)}, false});
    if (r.empty()) r.push_back({{id, 0}, false});  // keeps the id for target ops
    return r;
  };

  for (size_t id = 0; id < src.size(); ++id) {
    const Node& s = src.node(int32_t(id));
    if (is_chosen(src, s, wants)) {
      const Rep x = rep_of(s.inputs[0]);
      // a transpose of its own, so that the convolution is its only reader (and reads NHWC)
      const ValueRef xin = x.last ? transpose(x.v, kToFirst, s.name + "/from_nhwc") : x.v;
      const std::vector<Rep> y = copy(s, {xin, canonical(rep_of(s.inputs[1]), s.name)}, false);
      map[id] = {{transpose(y[0].v, kToLast, s.name + "/to_nhwc"), true}};
      continue;
    }
    bool takes_last = s.op->family == "elementwise" && s.outputs.size() == 1 && s.outputs[0].shape.size() == 4;
    bool reads_last = false;
    for (auto& v : s.inputs) {
      takes_last = takes_last && src.type(v).shape.size() <= 4;
      reads_last = reads_last || rep_of(v).last;
    }
    if (takes_last && reads_last) {
      // the op on NHWC values: each operand as it broadcasts against (N, H, W, C)
      std::vector<ValueRef> in;
      for (auto& v : s.inputs) {
        const Rep r = rep_of(v);
        const Shape& cs = src.type(v).shape;
        if (r.last || num_elements(cs) == 1) {
          in.push_back(r.v);
          continue;
        }
        Shape s4(4 - cs.size(), 1);
        s4.insert(s4.end(), cs.begin(), cs.end());
        const Shape last{s4[0], s4[2], s4[3], s4[1]};
        // moving C behind H and W keeps the bytes' order when C is 1 or H and W are
        if (s4[1] == 1 || (s4[2] == 1 && s4[3] == 1)) in.push_back(reshape(r.v, last, s.name + "/operand_nhwc"));
        else in.push_back(transpose(cs.size() == 4 ? r.v : reshape(r.v, s4, s.name + "/operand_4d"), kToLast, s.name + "/operand_nhwc"));
      }
      map[id] = copy(s, in, true);
      map[id][0].last = true;
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

}  // namespace mg

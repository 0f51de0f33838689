// Data-dependent ops on the Metal backend (Backend::run_data_dependent): they run between the
// stages of a run (runtime/executable.h), each as a small MPSGraph of its own run directly on
// the device's queue, whose result MPSGraph sizes at run time and which is read back to the
// host: the next stage is specialised for that size. See docs/metal.md.
#include <cstdint>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backends/metal/metal_internal.h"

namespace mg::metal {

namespace {

// One compiled-once MPSGraph per input type: placeholder -> nonZeroIndicesOfTensor:.
struct NonZeroGraph {
  TensorType in;
  MPSGraph* graph = nil;
  MPSGraphTensor* x = nil;
  MPSGraphTensor* result = nil;
};

std::mutex g_mu;
std::list<NonZeroGraph> g_graphs;  // most recent first, bounded (kMaxGraphs)
constexpr size_t kMaxGraphs = 16;

NonZeroGraph& non_zero_graph(const Node& node, const TensorType& in) API_AVAILABLE(macos(14.0)) {
  for (auto it = g_graphs.begin(); it != g_graphs.end(); ++it)
    if (it->in == in) {
      g_graphs.splice(g_graphs.begin(), g_graphs, it);
      return g_graphs.front();
    }
  NonZeroGraph e;
  e.in = in;
  e.graph = [MPSGraph new];
  e.x = [e.graph placeholderWithShape:mps_shape(in.shape) dataType:mps_dtype(in.dtype, node.op->name, node.name) name:nil];
  e.result = [e.graph nonZeroIndicesOfTensor:e.x name:nil];  // int32 (count, rank)
  g_graphs.push_front(e);
  if (g_graphs.size() > kMaxGraphs) g_graphs.pop_back();
  return g_graphs.front();
}

std::shared_ptr<Array> non_zero_indices(MetalDevice& dev, const Node& node, const TensorType& in, const Array& x) {
  const int64_t rank = int64_t(in.shape.size());
  if (x.size() == 0) return dev.allocate(DType::Int32, {0, rank});  // MPSGraph cannot wrap an empty buffer
  std::shared_ptr<Array> out;
  if (@available(macOS 14.0, *)) {
    guarded("non_zero_indices", [&] {
      MetalDevice::Impl& impl = dev.impl();
      std::lock_guard<std::mutex> l(g_mu);
      NonZeroGraph& e = non_zero_graph(node, in);
      id<MTLBuffer> b = buffer_of(x);
      if (b == nil) b = [impl.device newBufferWithBytes:x.data() length:x.nbytes() options:MTLResourceStorageModeShared];
      if (b == nil) raise(ErrorKind::Runtime, node.op->name, node.name, "metal: out of device memory for the input");
      MPSGraphTensorData* xd = [[MPSGraphTensorData alloc] initWithMTLBuffer:b
                                                                       shape:mps_shape(in.shape)
                                                                    dataType:mps_dtype(in.dtype, node.op->name, node.name)];
      MPSGraphTensorDataDictionary* res = nil;
      {
        std::lock_guard<std::mutex> lock(impl.encode_mu);  // one encoder at a time on the queue
        res = [e.graph runWithMTLCommandQueue:impl.queue feeds:@{e.x : xd} targetTensors:@[ e.result ] targetOperations:nil];
      }
      MPSGraphTensorData* r = res[e.result];
      if (r == nil || r.shape.count != 2)
        raise(ErrorKind::Runtime, node.op->name, node.name, "metal: MPSGraph returned no (count, rank) result");
      const int64_t count = r.shape[0].longLongValue;
      // a rank-0 input is carried as shape [1]: its single index column is dropped
      out = dev.allocate(DType::Int32, {count, rank});
      if (r.dataType != MPSDataTypeInt32)
        raise(ErrorKind::Runtime, node.op->name, node.name, "metal: MPSGraph's result is not int32");
      if (rank > 0 && out->nbytes() > 0) [[r mpsndarray] readBytes:out->data() strideBytes:nil];
    });
  } else {
    raise(ErrorKind::NotImplemented, node.op->name, node.name, "non_zero_indices needs macOS 14 or newer on the metal backend");
  }
  return out;
}

}  // namespace

std::vector<std::shared_ptr<Array>> run_data_dependent(MetalDevice& dev, const Node& node,
                                                       const std::vector<TensorType>& in_types,
                                                       const std::vector<std::shared_ptr<const Array>>& inputs) {
  if (node.op->name == "non_zero_indices") return {non_zero_indices(dev, node, in_types.at(0), *inputs.at(0))};
  raise(ErrorKind::NotImplemented, node.op->name, node.name, "is not implemented on the metal backend");
}

}  // namespace mg::metal

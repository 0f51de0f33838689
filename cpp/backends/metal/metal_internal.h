// Objective-C++ internals of the Metal backend, shared by the .mm files of this folder only.
// C++ code includes metal_backend.h, which holds no Objective-C type.
#pragma once
#if !defined(__OBJC__) || !defined(__cplusplus)
#error "metal_internal.h is Objective-C++ only; C++ code includes backends/metal/metal_backend.h"
#endif

#import <Foundation/Foundation.h>
#import <Metal/Metal.h>
#import <MetalPerformanceShaders/MetalPerformanceShaders.h>
#import <MetalPerformanceShadersGraph/MetalPerformanceShadersGraph.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/metal/metal_backend.h"
#include "core/attrs.h"
#include "core/error.h"
#include "core/graph.h"
#include "core/registry.h"

namespace mg::metal {

struct MetalDevice::Impl {
  id<MTLDevice> device = nil;
  id<MTLCommandQueue> queue = nil;
  MPSGraphDevice* graph_device = nil;
  std::mutex encode_mu;  // one encoder at a time on `queue`
  size_t page_size = 16384;
  std::string name;
};

// ---- limits checked before anything reaches MPSGraph (its failures are often aborts) ----
constexpr size_t kMaxRank = 16;                       // MPSNDArray / MPSGraphTensorData rank limit
constexpr int64_t kMaxDim = 2147483647;               // NDArray dimension length <= INT_MAX
constexpr uint64_t kMaxTensorBytes = 4294967295ull;   // NDArray total bytes must stay below 2**32
constexpr int64_t kMatmulMaxK = 32767;                // K >= 32767 is silently wrong on M1/M2: split K
constexpr int64_t kMatmulSplitK = 16384;

// ---- dtypes and shapes ----
// MPSDataType for an IR dtype. float64 and (before macOS 14) bfloat16 raise, naming the op.
MPSDataType mps_dtype(DType t, const std::string& op, const std::string& node);
// MPSGraph shape of an IR shape: rank-0 values are carried as [1] (as PyTorch's MPS backend
// does); every other shape is used as is. The bytes are the same.
MPSShape* mps_shape(const Shape& s);
bool is_float_dtype(DType t);
int dtype_bits(DType t);

// Runs f inside @autoreleasepool, turning Objective-C exceptions into GraphError(Runtime) and
// letting C++ exceptions leave only after the pool has been drained.
void guarded(const char* what, const std::function<void()>& f);

// The MTLBuffer behind an Array made by MetalDevice::allocate (nil for any other Array).
id<MTLBuffer> buffer_of(const Array& a);

// ---- lowering: IR node -> MPSGraph tensors ----
struct LowerEnv;

class LowerCtx {
 public:
  LowerCtx(MPSGraph* graph, const Node& node, std::vector<MPSGraphTensor*> in, std::vector<TensorType> in_types,
           std::vector<std::shared_ptr<const Array>>* keep_alive,
           std::function<MPSGraphTensor*()> run_counter = nullptr);

  MPSGraph* g;
  const Node& node;
  const std::string& op;
  std::vector<MPSGraphTensor*> in;
  std::vector<TensorType> in_types;
  const std::vector<TensorType>& out_types;
  std::vector<std::shared_ptr<const Array>>* keep_alive;  // constant payloads the program keeps
  // The program's run counter: a uint32 [2] placeholder (low word, high word) fed at every run
  // with the number of earlier runs of this program (stateful ops such as random_uniform_like
  // key their numbers on it). Created on first use; raises where the program has none.
  MPSGraphTensor* run_counter();
  // Evaluates nodes on host constants at compile time (the one specialisation used).
  ConstantEvaluator* host_evaluator = nullptr;
  ConstantEvaluator& evaluator() const;
  // The graph being lowered into (control flow lowers its regions' bodies through it).
  const LowerEnv* env = nullptr;

  const TensorType& out(size_t k = 0) const { return out_types.at(k); }
  DType in_dtype(size_t i = 0) const { return in_types.at(i).dtype; }

  [[noreturn]] void fail(ErrorKind kind, const std::string& msg) const;
  [[noreturn]] void needs_macos(const char* version, const std::string& what) const;

  // -- attributes: typed_attrs<S>(node) (core/typed_attrs.h), the struct the op's registry
  //    entry decodes into (core/ops/*_attrs.h); never looked up by name here --

  // -- constants --
  MPSGraphTensor* constant_bytes(const void* data, size_t nbytes, const Shape& shape, DType t);
  MPSGraphTensor* k(double v, DType t);                 // one element of shape [1]; broadcasts
  MPSGraphTensor* k_int(int64_t v, DType t);            // exact integer constant
  MPSGraphTensor* k_limit(DType t, bool max);           // exact min/max of an integer dtype
  MPSGraphTensor* fill(double v, const TensorType& t);  // a full tensor (broadcast of k)

  // -- building blocks (NaN and integer semantics of the CPU kernels are kept by callers) --
  MPSGraphTensor* add(MPSGraphTensor* a, MPSGraphTensor* b);
  MPSGraphTensor* sub(MPSGraphTensor* a, MPSGraphTensor* b);
  MPSGraphTensor* mul(MPSGraphTensor* a, MPSGraphTensor* b);
  MPSGraphTensor* div(MPSGraphTensor* a, MPSGraphTensor* b);
  MPSGraphTensor* sel(MPSGraphTensor* p, MPSGraphTensor* a, MPSGraphTensor* b);
  MPSGraphTensor* eq(MPSGraphTensor* a, MPSGraphTensor* b);
  MPSGraphTensor* ne(MPSGraphTensor* a, MPSGraphTensor* b);
  MPSGraphTensor* lt(MPSGraphTensor* a, MPSGraphTensor* b);
  MPSGraphTensor* le(MPSGraphTensor* a, MPSGraphTensor* b);
  MPSGraphTensor* gt(MPSGraphTensor* a, MPSGraphTensor* b);
  MPSGraphTensor* ge(MPSGraphTensor* a, MPSGraphTensor* b);
  MPSGraphTensor* land(MPSGraphTensor* a, MPSGraphTensor* b);
  MPSGraphTensor* lor(MPSGraphTensor* a, MPSGraphTensor* b);
  MPSGraphTensor* lnot(MPSGraphTensor* a);
  MPSGraphTensor* isnan(MPSGraphTensor* a);
  MPSGraphTensor* max_nan(MPSGraphTensor* a, MPSGraphTensor* b, DType t);  // NaN-propagating for floats
  MPSGraphTensor* min_nan(MPSGraphTensor* a, MPSGraphTensor* b, DType t);
  MPSGraphTensor* raw_cast(MPSGraphTensor* x, DType to);                  // castTensor:toType:name:
  // The `cast` op's semantics: float -> integer truncates and saturates, NaN -> 0; anything
  // nonzero -> True; integer -> integer wraps (two's complement).
  MPSGraphTensor* convert(MPSGraphTensor* x, DType from, DType to);
  // Integer casts of at most 32 bits with numpy's wrap, without int64 (metal_lower_common.mm).
  MPSGraphTensor* wrap_narrow(MPSGraphTensor* x, DType from, DType to);
  MPSGraphTensor* int32_bits_to_uint32(MPSGraphTensor* x);  // same bits, no out-of-range cast
  MPSGraphTensor* uint32_bits_to_int32(MPSGraphTensor* x);
  MPSGraphTensor* reshape(MPSGraphTensor* x, const Shape& shape);
  MPSGraphTensor* broadcast(MPSGraphTensor* x, const Shape& shape);
  // Brings a result to the node's declared output type k (shape [1] for rank 0).
  MPSGraphTensor* conform(MPSGraphTensor* x, size_t k);

  // -- shape helpers shared by the lowerings of the newer families --
  // A constant tensor of `shape` holding `values` (converted to dtype t, exactly for integers).
  MPSGraphTensor* constant_vector(const std::vector<double>& values, const Shape& shape, DType t);
  MPSGraphTensor* constant_ints(const std::vector<int64_t>& values, const Shape& shape, DType t);
  MPSGraphTensor* constant_bools(const std::vector<bool>& values, const Shape& shape);
  // sliceTensor:dimension:start:length: with a stride: `count` elements start, start+step, ...
  MPSGraphTensor* slice_axis(MPSGraphTensor* x, const Shape& xs, int64_t axis, int64_t start, int64_t step, int64_t count);
  // padTensor with constant 0 (or `value`) along one axis.
  MPSGraphTensor* pad_axis(MPSGraphTensor* x, const Shape& xs, int64_t axis, int64_t before, int64_t after, double value = 0.0);

 private:
  std::function<MPSGraphTensor*()> run_counter_;
};

using LowerFn = std::function<std::vector<MPSGraphTensor*>(LowerCtx&)>;
void register_lowering(const std::string& op, LowerFn fn);
const LowerFn* find_lowering(const std::string& op);
// A composite op this backend runs as MPSGraph's own op (Backend::implements_composite): `claim`
// sees the node at specialisation (its types concrete) and says whether MPSGraph's op applies;
// a composite not claimed is expanded into its decomposition, as on every other backend.
using ClaimFn = std::function<bool(const Node&)>;
void register_composite_lowering(const std::string& op, ClaimFn claim, LowerFn fn);
inline bool claim_always(const Node&) { return true; }  // a composite whose MPSGraph op covers every case
bool claims_composite(const Node& node);

// What lowering a specialised graph needs besides the graph: the MPSGraph it goes into, where
// constant payloads are kept, the host evaluator, and the hooks for its leaves. The top level
// makes placeholders, variables and the run counter through them; a control-flow region
// (whose variable reads the core made captures and whose assigns it made results) maps its
// placeholders to the tensors of its block and has no variable or run-counter hook.
struct LowerEnv {
  MPSGraph* g = nil;
  std::vector<std::shared_ptr<const Array>>* keep_alive = nullptr;
  ConstantEvaluator* evaluator = nullptr;
  std::function<MPSGraphTensor*()> run_counter;                     // empty: stateful ops refused
  std::function<MPSGraphTensor*(const Node&, size_t)> placeholder;  // the value of feed k (non-empty)
  std::function<MPSGraphTensor*(const Node&)> read_variable;        // non-empty values only
  std::function<void(const Node&, MPSGraphTensor*, const TensorType&)> assign_variable;  // nil: zero-size
};

// Lowers every node of a specialised graph into env.g, in order (zero-size values are nil and
// never reach MPSGraph; each result is conformed to its node's type); returns the tensors of
// `results` (nil where zero-size). feed_nodes[k] is the placeholder of feed k (-1: unused).
std::vector<MPSGraphTensor*> lower_graph(const LowerEnv& env, const Graph& G, const std::vector<int32_t>& feed_nodes,
                                         const std::vector<ValueRef>& results);
// Checks every type in a graph against MPSGraph's limits (float64, rank, sizes) before lowering.
void validate_graph(const Graph& g);

// Family registration (one per .mm file).
void register_elementwise_lowerings();
void register_reduction_lowerings();
void register_matmul_lowerings();
void register_shape_lowerings();
void register_creation_lowerings();
void register_random_lowerings();
void register_convolution_lowerings();
void register_pooling_lowerings();
void register_resize_lowerings();
void register_sparse_lowerings();
void register_gather_lowerings();
void register_sort_lowerings();
void register_linalg_lowerings();
void register_image_lowerings();
void register_quantization_lowerings();
void register_control_flow_lowerings();
void register_nn_lowerings();
void register_fft_lowerings();  // after elementwise: extends absolute and cast to complex
void register_attention_lowerings();
void register_rnn_lowerings();

}  // namespace mg::metal

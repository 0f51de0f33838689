// Compiling a specialised graph to ONE MPSGraph + MPSGraphExecutable, and running it:
// zero-copy feeds and results over MTLBuffers, encoding serialised on the device's queue,
// completion awaited inside Program::run, errors raised as GraphError.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <utility>

#include "backends/metal/metal_internal.h"

// An MPSCommandBuffer that remembers every underlying MTLCommandBuffer MPSGraph commits through
// commitAndContinue, so that the run can wait on each and check its status and error: the
// header only promises that rootCommandBuffer is the live one, not that earlier ones are kept.
@interface MGRecordingCommandBuffer : MPSCommandBuffer
@property(nonatomic, readonly) NSMutableArray<id<MTLCommandBuffer>>* committed;
@end

@implementation MGRecordingCommandBuffer {
  NSMutableArray<id<MTLCommandBuffer>>* committed_;
}
- (NSMutableArray<id<MTLCommandBuffer>>*)committed {
  if (committed_ == nil) committed_ = [NSMutableArray array];
  return committed_;
}
- (void)commitAndContinue {
  id<MTLCommandBuffer> root = self.rootCommandBuffer;
  if (root != nil) [self.committed addObject:root];
  [super commitAndContinue];
}
@end

namespace mg::metal {


namespace {

NSString* ns(const std::string& s) { return [NSString stringWithUTF8String:s.c_str()]; }

// ---------------- validation (before anything reaches MPSGraph) ----------------

void check_type(const Node& n, const TensorType& t) {
  const std::string& op = n.op->name;
  mps_dtype(t.dtype, op, n.name);  // float64 / bfloat16 before macOS 14 raise here
  if (t.shape.size() > kMaxRank)
    raise(ErrorKind::Value, op, n.name,
          "a tensor of rank " + std::to_string(t.shape.size()) + " " + type_str(t) +
              " exceeds MPSGraph's limit of 16 dimensions on the metal backend");
  for (int64_t d : t.shape)
    if (d > kMaxDim)
      raise(ErrorKind::Value, op, n.name,
            "dimension " + std::to_string(d) + " of " + type_str(t) + " exceeds MPSGraph's limit of 2**31-1");
  const uint64_t bytes = uint64_t(num_elements(t.shape)) * dtype_size(t.dtype);
  if (bytes > kMaxTensorBytes)
    raise(ErrorKind::Value, op, n.name,
          "tensor " + type_str(t) + " holds " + std::to_string(bytes) +
              " bytes; MPSGraph tensors must stay below 4 GiB (2**32 bytes) on the metal backend");
}

// ---------------- the program ----------------

struct FeedSlot {
  // RunCounter: uint32 [2], the number of earlier runs of this program (low word, high word),
  // which stateful ops (random_uniform_like) key their numbers on.
  enum Kind { Input, Variable, RunCounter } kind;
  int64_t index;  // input index or variable id (unused for RunCounter)
  TensorType type;
  MPSGraphTensor* tensor;
  std::string name;
  MPSShape* shape;  // from the IR type (rank 0 as [1]), never from MPSGraph's inference
  MPSDataType dtype;
};

struct ResultSlot {
  enum Kind { Output, Assign } kind;
  int64_t index;  // output index or variable id
  TensorType type;
  MPSGraphTensor* tensor;
  std::string name;
  MPSShape* shape;
  MPSDataType dtype;
};

struct Staged {  // a result written to a scratch MTLBuffer, copied to host memory after the run
  id<MTLBuffer> buffer;
  void* dst;
  size_t nbytes;
};

// Host memory that newBufferWithBytesNoCopy can wrap: a page-aligned start. The length passed
// is rounded up to whole pages (Apple's rule): the last page holds the end of the tensor, so it
// is mapped, whoever allocated it (Buffer::allocate rounds its large blocks to pages anyway),
// and MPSGraph touches only the tensor's own bytes.
bool page_aligned(const void* p, size_t n, size_t page) {
  return n > 0 && (reinterpret_cast<uintptr_t>(p) % page) == 0;
}
size_t page_rounded(size_t n, size_t page) { return (n + page - 1) / page * page; }

// The outcome MPSGraph's completion handler reports, shared between the handler and the run.
struct Completion {
  std::mutex mu;
  std::condition_variable cv;
  bool called = false;
  std::string error;
};

std::string describe(NSError* e) {
  NSString* d = e.localizedDescription;
  std::string r = d ? std::string(d.UTF8String) : std::string("(no description)");
  if (e.domain) r += std::string(" (") + e.domain.UTF8String + " " + std::to_string(long(e.code)) + ")";
  return r;
}

bool overlaps(const Array& a, const Array& b) {
  auto pa = static_cast<const char*>(a.data()), pb = static_cast<const char*>(b.data());
  size_t na = a.nbytes(), nb = b.nbytes();
  return pa && pb && na && nb && pa < pb + nb && pb < pa + na;
}

// A node with a non-empty result and an empty input: its value depends on shapes (and on
// inputs that are constants, or that are only a shape source) and is computed now, on the
// CPU, then embedded as constants.
std::vector<MPSGraphTensor*> evaluate_shape_only(const Graph& G, const Node& n, LowerCtx& c) {
  const std::string& op = n.op->name;
  std::vector<std::shared_ptr<const Array>> args;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const ValueRef v = n.inputs[i];
    const TensorType& t = G.type(v);
    const Node& src = G.node(v.node);
    if (num_elements(t.shape) == 0) {
      args.push_back(Array::empty(t.dtype, t.shape));
    } else if (src.op->name == "constant") {
      args.push_back(node_attr<std::shared_ptr<const Array>>(src, "value"));
    } else if (n.op->input_spec(i).role == InputRole::ShapeOnly) {  // values never read
      auto dummy = Array::empty(t.dtype, t.shape);
      std::memset(dummy->data(), 0, dummy->nbytes());
      args.push_back(dummy);
    } else {
      raise(ErrorKind::NotImplemented, op, n.name,
            "a zero-size input next to a computed non-empty one is not implemented on the metal backend");
    }
  }
  std::vector<std::shared_ptr<Array>> values = c.evaluator().evaluate(n, args);
  if (values.size() != n.outputs.size())
    raise(ErrorKind::NotImplemented, op, n.name, "cannot evaluate this zero-size case on the metal backend");
  std::vector<MPSGraphTensor*> outs;
  for (auto& v : values) {
    if (v->size() == 0) {
      outs.push_back(nil);
      continue;
    }
    c.keep_alive->push_back(v);
    NSData* d = [NSData dataWithBytesNoCopy:v->data() length:v->nbytes() freeWhenDone:NO];
    outs.push_back([c.g constantWithData:d shape:mps_shape(v->shape) dataType:mps_dtype(v->dtype, op, n.name)]);
  }
  return outs;
}

class MetalProgram final : public Program {
 public:
  MetalProgram(std::shared_ptr<MetalDevice> dev, std::shared_ptr<VariableStore> vars)
      : dev_(std::move(dev)), vars_(std::move(vars)) {}
  ~MetalProgram() override {
    @autoreleasepool {
      feeds_.clear();
      results_.clear();
      exe_ = nil;
      graph_ = nil;
    }
  }

  void build(const Specialised& sg);
  void run(const std::vector<std::shared_ptr<Array>>& inputs,
           const std::vector<std::shared_ptr<Array>>& outputs) override;

 private:
  MPSGraphTensorData* wrap_input(const Array& a, MPSShape* shape, MPSDataType dtype);
  MPSGraphTensorData* wrap_result(const Array& a, MPSShape* shape, MPSDataType dtype, const std::vector<const Array*>& ins,
                                  std::vector<Staged>& staged);

  std::shared_ptr<MetalDevice> dev_;
  std::shared_ptr<VariableStore> vars_;
  size_t num_inputs_ = 0, num_outputs_ = 0;
  std::vector<std::shared_ptr<const Array>> keep_alive_;  // constant payloads (destroyed last)
  MPSGraph* graph_ = nil;
  MPSGraphExecutable* exe_ = nil;
  std::vector<FeedSlot> feeds_;      // in exe_.feedTensors order
  std::vector<ResultSlot> results_;  // in exe_.targetTensors order
  std::vector<std::pair<int64_t, TensorType>> empty_assigns_;  // zero-size values assigned to variables
  std::atomic<uint64_t> runs_{0};  // runs so far (the RunCounter feed), as the CPU kernels' per-executable counters
};

void MetalProgram::build(const Specialised& sg) {
  const Graph& G = *sg.graph;
  MetalDevice::Impl& impl = dev_->impl();
  num_inputs_ = sg.feeds.size();
  num_outputs_ = sg.targets.size();
  MPSGraph* g = [MPSGraph new];
  std::vector<FeedSlot> feeds;
  std::vector<ResultSlot> results;
  struct PendingAssign {
    int64_t var;
    MPSGraphTensor* value;
    TensorType type;
  };
  std::vector<PendingAssign> assigns;
  // The run counter placeholder, made when a lowering first asks for it.
  MPSGraphTensor* counter = nil;
  LowerEnv env;
  env.g = g;
  env.keep_alive = &keep_alive_;
  env.evaluator = sg.evaluator;
  env.run_counter = [&]() -> MPSGraphTensor* {
    if (counter == nil) {
      const std::string name = "mg_runs";
      MPSShape* shape = @[ @2 ];
      counter = [g placeholderWithShape:shape dataType:MPSDataTypeUInt32 name:ns(name)];
      feeds.push_back({FeedSlot::RunCounter, 0, TensorType{DType::UInt32, Shape{2}}, counter, name, shape, MPSDataTypeUInt32});
    }
    return counter;
  };
  env.placeholder = [&](const Node& n, size_t idx) -> MPSGraphTensor* {
    const TensorType& t = n.outputs[0];
    std::string name = "mg_in_" + std::to_string(idx);
    MPSShape* shape = mps_shape(t.shape);
    MPSDataType dt = mps_dtype(t.dtype, n.op->name, n.name);
    MPSGraphTensor* p = [g placeholderWithShape:shape dataType:dt name:ns(name)];
    feeds.push_back({FeedSlot::Input, int64_t(idx), t, p, name, shape, dt});
    return p;
  };
  env.read_variable = [&](const Node& n) -> MPSGraphTensor* {  // a placeholder fed from the VariableStore at every run
    int64_t var = node_attr<int64_t>(n, "variable");
    const TensorType& t = n.outputs[0];
    std::string name = "mg_var_" + std::to_string(n.id);
    MPSShape* shape = mps_shape(t.shape);
    MPSDataType dt = mps_dtype(t.dtype, n.op->name, n.name);
    MPSGraphTensor* p = [g placeholderWithShape:shape dataType:dt name:ns(name)];
    feeds.push_back({FeedSlot::Variable, var, t, p, name, shape, dt});
    return p;
  };
  env.assign_variable = [&](const Node& n, MPSGraphTensor* value, const TensorType& t) {  // lands after the run
    if (value == nil) empty_assigns_.push_back({node_attr<int64_t>(n, "variable"), t});
    else assigns.push_back({node_attr<int64_t>(n, "variable"), value, t});
  };
  const std::vector<MPSGraphTensor*> vals = lower_graph(env, G, sg.feeds, sg.targets);

  // Every result goes through its own named identity: duplicated targets, targets that are
  // placeholders or constants, and assigned values then all get a distinct result tensor.
  NSMutableArray<MPSGraphTensor*>* targets = [NSMutableArray array];
  for (size_t k = 0; k < sg.targets.size(); ++k) {
    const ValueRef v = sg.targets[k];
    if (num_elements(G.type(v).shape) == 0) continue;  // nothing to write
    std::string name = "mg_out_" + std::to_string(k);
    MPSGraphTensor* t = [g identityWithTensor:vals[k] name:ns(name)];
    const TensorType& ty = G.type(v);
    results.push_back({ResultSlot::Output, int64_t(k), ty, t, name, mps_shape(ty.shape), mps_dtype(ty.dtype, "run", "")});
    [targets addObject:t];
  }
  for (size_t i = 0; i < assigns.size(); ++i) {
    std::string name = "mg_assign_" + std::to_string(i);
    MPSGraphTensor* t = [g identityWithTensor:assigns[i].value name:ns(name)];
    const TensorType& ty = assigns[i].type;
    results.push_back({ResultSlot::Assign, assigns[i].var, ty, t, name, mps_shape(ty.shape), mps_dtype(ty.dtype, "assign_variable", "")});
    [targets addObject:t];
  }
  graph_ = g;
  if (results.empty()) return;  // nothing to compute (empty results, empty assigns)

  NSMutableDictionary<MPSGraphTensor*, MPSGraphShapedType*>* feed_types = [NSMutableDictionary dictionary];
  for (auto& f : feeds) feed_types[f.tensor] = [[MPSGraphShapedType alloc] initWithShape:f.shape dataType:f.dtype];
  MPSGraphCompilationDescriptor* cd = [MPSGraphCompilationDescriptor new];
  cd.optimizationLevel = MPSGraphOptimizationLevel0;  // GPU only, as PyTorch does (Level1 may place ops on the ANE/CPU)
  cd.waitForCompilationCompletion = YES;              // compile errors surface in compile(), not at the first run
  MPSGraphExecutable* exe = [g compileWithDevice:impl.graph_device
                                           feeds:feed_types
                                   targetTensors:targets
                                targetOperations:nil
                           compilationDescriptor:cd];
  if (exe == nil) raise(ErrorKind::Runtime, "compile", "", "metal: MPSGraph returned no executable");

  // The executable fixes the order of inputsArray / resultsArray: map ours onto it, by
  // identity or, should MPSGraph hand back copies, by operation name.
  auto same = [](MPSGraphTensor* a, MPSGraphTensor* b, const std::string& name) {
    return a == b || (a.operation.name && [a.operation.name isEqualToString:ns(name)]);
  };
  NSArray<MPSGraphTensor*>* ft = exe.feedTensors;
  if (ft) {
    for (MPSGraphTensor* t in ft) {
      auto it = std::find_if(feeds.begin(), feeds.end(), [&](const FeedSlot& f) { return same(t, f.tensor, f.name); });
      if (it == feeds.end()) raise(ErrorKind::Runtime, "compile", "", "metal: the executable expects an unknown feed");
      feeds_.push_back(*it);
    }
  } else {
    feeds_ = feeds;
  }
  NSArray<MPSGraphTensor*>* tt = exe.targetTensors;
  if (tt) {
    for (MPSGraphTensor* t in tt) {
      auto it = std::find_if(results.begin(), results.end(), [&](const ResultSlot& r) { return same(t, r.tensor, r.name); });
      if (it == results.end()) raise(ErrorKind::Runtime, "compile", "", "metal: the executable returns an unknown result");
      results_.push_back(*it);
    }
    if (results_.size() != results.size())
      raise(ErrorKind::Runtime, "compile", "", "metal: the executable dropped some results");
  } else {
    results_ = results;
  }

  // Specialise now, so the first run does not pay for it.
  NSMutableArray<MPSGraphType*>* input_types = [NSMutableArray array];
  for (auto& f : feeds_) [input_types addObject:[[MPSGraphShapedType alloc] initWithShape:f.shape dataType:f.dtype]];
  [exe specializeWithDevice:impl.graph_device inputTypes:input_types compilationDescriptor:cd];
  exe_ = exe;
}

MPSGraphTensorData* MetalProgram::wrap_input(const Array& a, MPSShape* shape, MPSDataType dtype) {
  MetalDevice::Impl& impl = dev_->impl();
  const size_t nbytes = a.nbytes();
  id<MTLBuffer> b = buffer_of(a);  // our own MTLBuffer: no copy
  if (b == nil) {
    void* p = a.data();
    const size_t mapped = page_rounded(nbytes, impl.page_size);
    if (page_aligned(p, nbytes, impl.page_size) && mapped <= impl.device.maxBufferLength)
      b = [impl.device newBufferWithBytesNoCopy:p length:mapped options:MTLResourceStorageModeShared deallocator:nil];
    if (b == nil) b = [impl.device newBufferWithBytes:p length:nbytes options:MTLResourceStorageModeShared];  // one copy
    if (b == nil) raise(ErrorKind::Runtime, "run", "", "metal: out of device memory for an input of " + std::to_string(nbytes) + " bytes");
  }
  return [[MPSGraphTensorData alloc] initWithMTLBuffer:b shape:shape dataType:dtype];
}

MPSGraphTensorData* MetalProgram::wrap_result(const Array& a, MPSShape* shape, MPSDataType dtype,
                                              const std::vector<const Array*>& ins, std::vector<Staged>& staged) {
  MetalDevice::Impl& impl = dev_->impl();
  const size_t nbytes = a.nbytes();
  bool alias = false;
  for (const Array* in : ins) alias = alias || overlaps(a, *in);
  id<MTLBuffer> b = alias ? nil : buffer_of(a);
  const size_t mapped = page_rounded(nbytes, impl.page_size);
  if (b == nil && !alias && page_aligned(a.data(), nbytes, impl.page_size) && mapped <= impl.device.maxBufferLength)
    b = [impl.device newBufferWithBytesNoCopy:a.data() length:mapped options:MTLResourceStorageModeShared deallocator:nil];
  if (b == nil) {
    b = [impl.device newBufferWithLength:nbytes options:MTLResourceStorageModeShared];
    if (b == nil) raise(ErrorKind::Runtime, "run", "", "metal: out of device memory for a result of " + std::to_string(nbytes) + " bytes");
    staged.push_back({b, a.data(), nbytes});
  }
  return [[MPSGraphTensorData alloc] initWithMTLBuffer:b shape:shape dataType:dtype];
}

void MetalProgram::run(const std::vector<std::shared_ptr<Array>>& inputs,
                       const std::vector<std::shared_ptr<Array>>& outputs) {
  if (inputs.size() != num_inputs_ || outputs.size() != num_outputs_)
    raise(ErrorKind::Value, "run", "", "metal program called with " + std::to_string(inputs.size()) + " inputs and " +
                                           std::to_string(outputs.size()) + " outputs, expected " +
                                           std::to_string(num_inputs_) + " and " + std::to_string(num_outputs_));
  auto land_empty_assigns = [&] {
    for (auto& ea : empty_assigns_) vars_->set(ea.first, Array::empty(ea.second.dtype, ea.second.shape));
  };
  if (!exe_) {
    land_empty_assigns();
    return;
  }
  std::vector<std::shared_ptr<Array>> held;  // variable values read and written by this run
  std::vector<std::pair<int64_t, std::shared_ptr<Array>>> assigned;
  const uint64_t run_index = runs_.fetch_add(1);  // this run's number, for the RunCounter feed
  guarded("run", [&] {
    MetalDevice::Impl& impl = dev_->impl();
    NSMutableArray<MPSGraphTensorData*>* ins = [NSMutableArray arrayWithCapacity:feeds_.size()];
    std::vector<const Array*> in_arrays;
    for (auto& f : feeds_) {
      if (f.kind == FeedSlot::RunCounter) {
        const uint32_t words[2] = {uint32_t(run_index), uint32_t(run_index >> 32)};
        id<MTLBuffer> b = [impl.device newBufferWithBytes:words length:sizeof(words) options:MTLResourceStorageModeShared];
        if (b == nil) raise(ErrorKind::Runtime, "run", "", "metal: out of device memory for the run counter");
        [ins addObject:[[MPSGraphTensorData alloc] initWithMTLBuffer:b shape:f.shape dataType:f.dtype]];
        continue;
      }
      std::shared_ptr<Array> a;
      if (f.kind == FeedSlot::Input) {
        a = inputs.at(size_t(f.index));
      } else {
        a = vars_->get(f.index);
        held.push_back(a);
      }
      if (!a || a->dtype != f.type.dtype || a->shape != f.type.shape)
        raise(ErrorKind::Value, f.kind == FeedSlot::Input ? "placeholder" : "read_variable", "",
              std::string(f.kind == FeedSlot::Input ? "input" : "variable") + " holds " +
                  (a ? type_str({a->dtype, a->shape}) : std::string("nothing")) +
                  " but the executable was compiled for " + type_str(f.type));
      if (!a->buffer || a->buffer->nbytes < a->nbytes() || !a->data())
        raise(ErrorKind::Value, "run", "", "an input's buffer is smaller than its shape " + type_str(f.type));
      [ins addObject:wrap_input(*a, f.shape, f.dtype)];
      in_arrays.push_back(a.get());
    }
    NSMutableArray<MPSGraphTensorData*>* outs = [NSMutableArray arrayWithCapacity:results_.size()];
    std::vector<Array*> out_arrays;
    std::vector<Staged> staged;
    for (auto& r : results_) {
      std::shared_ptr<Array> a;
      if (r.kind == ResultSlot::Output) {
        a = outputs.at(size_t(r.index));
        if (!a || a->dtype != r.type.dtype || a->shape != r.type.shape || !a->buffer || a->buffer->nbytes < a->nbytes())
          raise(ErrorKind::Value, "run", "", "output " + std::to_string(r.index) + " is not a buffer of " + type_str(r.type));
      } else {
        a = dev_->allocate(r.type.dtype, r.type.shape);  // a fresh value: readers of the old one keep it
        assigned.push_back({r.index, a});
      }
      held.push_back(a);
      [outs addObject:wrap_result(*a, r.shape, r.dtype, in_arrays, staged)];
      out_arrays.push_back(a.get());
    }

    // MPSGraph reports the execution's outcome once, through the completion handler. Its error
    // goes into a state shared with the block (mutex + condition variable: no unsynchronised
    // write), and the run waits for it without a timeout that could drop it.
    auto done = std::make_shared<Completion>();
    MPSGraphExecutableExecutionDescriptor* ed = [MPSGraphExecutableExecutionDescriptor new];
    ed.waitUntilCompleted = NO;
    ed.completionHandler = ^(NSArray<MPSGraphTensorData*>* results, NSError* error) {
      std::lock_guard<std::mutex> l(done->mu);
      if (error) done->error = describe(error);
      done->called = true;
      done->cv.notify_all();
    };
    NSArray<MPSGraphTensorData*>* returned = nil;
    MGRecordingCommandBuffer* cb = nil;
    NSMutableArray<id<MTLCommandBuffer>>* buffers = nil;  // every buffer this run committed, in order
    {
      std::lock_guard<std::mutex> lock(impl.encode_mu);  // one encoder at a time on the queue
      cb = [MGRecordingCommandBuffer commandBufferFromCommandQueue:impl.queue];
      if (cb == nil) raise(ErrorKind::Runtime, "run", "", "metal: could not create a command buffer");
      @try {
        returned = [exe_ encodeToCommandBuffer:cb inputsArray:ins resultsArray:outs executionDescriptor:ed];
      } @catch (NSException* e) {
        // buffers MPSGraph committed before it raised still use our memory: wait for them
        for (id<MTLCommandBuffer> b in cb.committed) [b waitUntilCompleted];
        @throw;
      }
      buffers = [cb.committed mutableCopy];
      id<MTLCommandBuffer> root = cb.rootCommandBuffer;
      [cb commit];
      if (root != nil) [buffers addObject:root];
    }
    // Program::run is synchronous: wait for every committed buffer, then check each one.
    std::string failed;
    for (id<MTLCommandBuffer> b in buffers) {
      [b waitUntilCompleted];
      if (failed.empty() && b.status == MTLCommandBufferStatusError)
        failed = b.error ? describe(b.error) : std::string("unknown error");
    }
    std::string graph_error;
    bool called = false;
    {
      std::unique_lock<std::mutex> l(done->mu);
      // The handler runs once the execution has completed, i.e. around the buffers' own
      // completion; should it never come, say so rather than continue as if it had.
      called = done->cv.wait_for(l, std::chrono::seconds(60), [&] { return done->called; });
      graph_error = done->error;
    }
    if (!failed.empty()) raise(ErrorKind::Runtime, "run", "", "metal: the command buffer failed: " + failed);
    if (!graph_error.empty()) raise(ErrorKind::Runtime, "run", "", "metal: MPSGraph failed: " + graph_error);
    if (!called)
      raise(ErrorKind::Runtime, "run", "", "metal: MPSGraph did not report the run's completion within 60 s of its "
                                           "command buffers completing; its results are not trusted");

    for (auto& s : staged) std::memcpy(s.dst, s.buffer.contents, s.nbytes);
    if (returned && returned.count == outs.count) {  // results MPSGraph placed elsewhere: read them back
      for (NSUInteger i = 0; i < outs.count; ++i)
        if (returned[i] != outs[i]) [[returned[i] mpsndarray] readBytes:out_arrays[i]->data() strideBytes:nil];
    }
  });
  for (auto& a : assigned) vars_->set(a.first, a.second);  // assigns land when the run completes
  land_empty_assigns();
}

}  // namespace

void validate_graph(const Graph& g) {
  for (size_t id = 0; id < g.size(); ++id) {
    const Node& n = g.node(int32_t(id));
    for (auto& v : n.inputs) check_type(n, g.type(v));
    for (auto& t : n.outputs) check_type(n, t);
  }
}

std::vector<MPSGraphTensor*> lower_graph(const LowerEnv& env, const Graph& G, const std::vector<int32_t>& feed_nodes,
                                         const std::vector<ValueRef>& results) {
  MPSGraph* g = env.g;
  std::vector<std::vector<MPSGraphTensor*>> vals(G.size());
  // Zero-size tensors never reach MPSGraph (an MTLBuffer cannot be empty): their value is
  // nil here. A node whose outputs are all empty is skipped; one that makes a non-empty
  // result from empty inputs (a reduction over an empty axis, a K=0 matmul, padding an empty
  // tensor, a gradient into `like`'s shape) depends on shapes only and is evaluated once at
  // compile time by the CPU backend; concat just leaves its empty pieces out; control-flow
  // nodes get the nil values and leave them out of their blocks' interfaces.
  auto is_empty = [](const TensorType& t) { return num_elements(t.shape) == 0; };
  auto missing = [](const Node& n, const char* what) {
    raise(ErrorKind::Runtime, n.op->name, n.name, std::string("internal error: ") + what + " inside a control-flow region");
  };
  for (size_t id = 0; id < G.size(); ++id) {
    const Node& n = G.node(int32_t(id));
    const std::string& op = n.op->name;
    if (op == "placeholder") {
      auto it = std::find(feed_nodes.begin(), feed_nodes.end(), int32_t(id));
      if (it == feed_nodes.end()) raise(ErrorKind::Value, op, n.name, "placeholder has no feed");
      vals[id] = {is_empty(n.outputs[0]) ? nil : env.placeholder(n, size_t(it - feed_nodes.begin()))};
      continue;
    }
    if (op == "constant") {
      auto value = node_attr<std::shared_ptr<const Array>>(n, "value");
      if (value->size() == 0) {
        vals[id] = {nil};
        continue;
      }
      env.keep_alive->push_back(value);
      NSData* d = [NSData dataWithBytesNoCopy:const_cast<void*>(value->data()) length:value->nbytes() freeWhenDone:NO];
      vals[id] = {[g constantWithData:d shape:mps_shape(value->shape) dataType:mps_dtype(value->dtype, op, n.name)]};
      continue;
    }
    if (op == "read_variable") {  // regions capture variable reads: only the top level has them
      if (!env.read_variable) missing(n, "a variable read");
      vals[id] = {is_empty(n.outputs[0]) ? nil : env.read_variable(n)};
      continue;
    }
    if (op == "assign_variable") {  // the core rewrites a region's assigns into its results
      if (!env.assign_variable) missing(n, "a variable assign");
      const ValueRef v = n.inputs.at(0);
      env.assign_variable(n, vals[size_t(v.node)].at(size_t(v.index)), G.type(v));
      continue;
    }
    const LowerFn* fn = find_lowering(op);
    if (!fn) raise(ErrorKind::NotImplemented, op, n.name, "is not implemented on the metal backend");
    bool all_empty = true, any_empty_in = false;
    for (auto& t : n.outputs) all_empty = all_empty && is_empty(t);
    std::vector<MPSGraphTensor*> ins;
    std::vector<TensorType> in_types;
    for (auto& v : n.inputs) {
      ins.push_back(vals[size_t(v.node)].at(size_t(v.index)));
      in_types.push_back(G.type(v));
      any_empty_in = any_empty_in || is_empty(G.type(v));
    }
    if (all_empty) {
      vals[id].assign(n.outputs.size(), nil);
      continue;
    }
    if (!n.regions.empty()) any_empty_in = false;  // control flow: the lowering handles nil inputs
    if (any_empty_in && op == "concat") {  // leave the empty pieces out
      std::vector<MPSGraphTensor*> kept;
      std::vector<TensorType> kept_types;
      for (size_t i = 0; i < ins.size(); ++i)
        if (!is_empty(in_types[i])) {
          kept.push_back(ins[i]);
          kept_types.push_back(in_types[i]);
        }
      ins = std::move(kept);
      in_types = std::move(kept_types);
      any_empty_in = false;
    }
    std::vector<MPSGraphTensor*> outs;
    LowerCtx c(g, n, std::move(ins), std::move(in_types), env.keep_alive, env.run_counter);
    c.host_evaluator = env.evaluator;
    c.env = &env;
    if (any_empty_in && !n.op->composite()) {  // a claimed composite handles its nil inputs itself
      outs = evaluate_shape_only(G, n, c);
    } else {
      outs = (*fn)(c);
      if (outs.size() != n.outputs.size())
        raise(ErrorKind::Runtime, op, n.name, "internal error: the metal lowering produced " + std::to_string(outs.size()) +
                                                  " results for " + std::to_string(n.outputs.size()) + " outputs");
    }
    for (size_t k = 0; k < outs.size(); ++k) {
      if (is_empty(n.outputs[k])) {
        outs[k] = nil;
        continue;
      }
      if (outs[k] == nil) raise(ErrorKind::Runtime, op, n.name, "internal error: the metal lowering produced no tensor");
      outs[k] = c.conform(outs[k], k);
    }
    vals[id] = std::move(outs);
  }
  std::vector<MPSGraphTensor*> out;
  for (auto& v : results) out.push_back(vals[size_t(v.node)].at(size_t(v.index)));
  return out;
}

std::unique_ptr<Program> compile_program(const std::shared_ptr<MetalDevice>& device, const Specialised& sg) {
  validate_graph(*sg.graph);
  auto prog = std::make_unique<MetalProgram>(device, sg.vars);
  guarded("compile", [&] { prog->build(sg); });
  return prog;
}

}  // namespace mg::metal

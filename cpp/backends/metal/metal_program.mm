// Compiling a specialised graph to ONE MPSGraph + MPSGraphExecutable, and running it:
// zero-copy feeds and results over MTLBuffers, encoding serialised on the device's queue,
// completion awaited inside Program::run, errors raised as GraphError.
#include <algorithm>
#include <cstring>

#include "backends/metal/metal_internal.h"

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

// Returns true when some tensor has no elements: MTLBuffers cannot be empty, so such
// programs run on the CPU backend (their results hold nothing or are exact fills).
bool validate(const Specialised& sg) {
  const Graph& g = *sg.graph;
  bool empty = false;
  for (size_t id = 0; id < g.size(); ++id) {
    const Node& n = g.node(int32_t(id));
    for (auto& v : n.inputs) {
      const TensorType& t = g.type(v);
      check_type(n, t);
      empty = empty || num_elements(t.shape) == 0;
    }
    for (auto& t : n.outputs) {
      check_type(n, t);
      empty = empty || num_elements(t.shape) == 0;
    }
  }
  return empty;
}

// ---------------- the program ----------------

struct FeedSlot {
  enum Kind { Input, Variable } kind;
  int64_t index;  // input index or variable id
  TensorType type;
  MPSGraphTensor* tensor;
  std::string name;
};

struct ResultSlot {
  enum Kind { Output, Assign } kind;
  int64_t index;  // output index or variable id
  TensorType type;
  MPSGraphTensor* tensor;
  std::string name;
};

struct Staged {  // a result written to a scratch MTLBuffer, copied to host memory after the run
  id<MTLBuffer> buffer;
  void* dst;
  size_t nbytes;
};

bool aligned_to(const void* p, size_t n, size_t page) {
  return n > 0 && (reinterpret_cast<uintptr_t>(p) % page) == 0 && (n % page) == 0;
}

bool overlaps(const Array& a, const Array& b) {
  auto pa = static_cast<const char*>(a.data()), pb = static_cast<const char*>(b.data());
  size_t na = a.nbytes(), nb = b.nbytes();
  return pa && pb && na && nb && pa < pb + nb && pb < pa + na;
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
  MPSGraphTensorData* wrap_input(const Array& a, MPSGraphTensor* t);
  MPSGraphTensorData* wrap_result(const Array& a, MPSGraphTensor* t, const std::vector<const Array*>& ins,
                                  std::vector<Staged>& staged);

  std::shared_ptr<MetalDevice> dev_;
  std::shared_ptr<VariableStore> vars_;
  size_t num_inputs_ = 0, num_outputs_ = 0;
  std::vector<std::shared_ptr<const Array>> keep_alive_;  // constant payloads (destroyed last)
  MPSGraph* graph_ = nil;
  MPSGraphExecutable* exe_ = nil;
  std::vector<FeedSlot> feeds_;      // in exe_.feedTensors order
  std::vector<ResultSlot> results_;  // in exe_.targetTensors order
};

void MetalProgram::build(const Specialised& sg) {
  const Graph& G = *sg.graph;
  MetalDevice::Impl& impl = dev_->impl();
  num_inputs_ = sg.feeds.size();
  num_outputs_ = sg.targets.size();
  MPSGraph* g = [MPSGraph new];
  std::vector<std::vector<MPSGraphTensor*>> vals(G.size());
  std::vector<FeedSlot> feeds;
  std::vector<ResultSlot> results;
  struct PendingAssign {
    int64_t var;
    MPSGraphTensor* value;
    TensorType type;
  };
  std::vector<PendingAssign> assigns;

  for (size_t id = 0; id < G.size(); ++id) {
    const Node& n = G.node(int32_t(id));
    const std::string& op = n.op->name;
    if (op == "placeholder") {
      auto it = std::find(sg.feeds.begin(), sg.feeds.end(), int32_t(id));
      if (it == sg.feeds.end()) raise(ErrorKind::Value, op, n.name, "placeholder has no feed");
      int64_t idx = it - sg.feeds.begin();
      const TensorType& t = n.outputs[0];
      std::string name = "mg_in_" + std::to_string(idx);
      MPSGraphTensor* p = [g placeholderWithShape:mps_shape(t.shape) dataType:mps_dtype(t.dtype, op, n.name) name:ns(name)];
      feeds.push_back({FeedSlot::Input, idx, t, p, name});
      vals[id] = {p};
      continue;
    }
    if (op == "constant") {
      auto value = node_attr<std::shared_ptr<const Array>>(n, "value");
      keep_alive_.push_back(value);
      NSData* d = [NSData dataWithBytesNoCopy:const_cast<void*>(value->data()) length:value->nbytes() freeWhenDone:NO];
      vals[id] = {[g constantWithData:d shape:mps_shape(value->shape) dataType:mps_dtype(value->dtype, op, n.name)]};
      continue;
    }
    if (op == "read_variable") {  // a placeholder fed from the VariableStore at every run
      int64_t var = node_attr<int64_t>(n, "variable");
      const TensorType& t = n.outputs[0];
      std::string name = "mg_var_" + std::to_string(id);
      MPSGraphTensor* p = [g placeholderWithShape:mps_shape(t.shape) dataType:mps_dtype(t.dtype, op, n.name) name:ns(name)];
      feeds.push_back({FeedSlot::Variable, var, t, p, name});
      vals[id] = {p};
      continue;
    }
    if (op == "assign_variable") {  // the value becomes a result; it lands after the run
      const ValueRef v = n.inputs.at(0);
      assigns.push_back({node_attr<int64_t>(n, "variable"), vals[size_t(v.node)].at(size_t(v.index)), G.type(v)});
      continue;
    }
    const LowerFn* fn = find_lowering(op);
    if (!fn) raise(ErrorKind::NotImplemented, op, n.name, "is not implemented on the metal backend");
    std::vector<MPSGraphTensor*> ins;
    std::vector<TensorType> in_types;
    for (auto& v : n.inputs) {
      ins.push_back(vals[size_t(v.node)].at(size_t(v.index)));
      in_types.push_back(G.type(v));
    }
    LowerCtx c(g, n, std::move(ins), std::move(in_types), &keep_alive_);
    std::vector<MPSGraphTensor*> outs = (*fn)(c);
    if (outs.size() != n.outputs.size())
      raise(ErrorKind::Runtime, op, n.name, "internal error: the metal lowering produced " + std::to_string(outs.size()) +
                                                " results for " + std::to_string(n.outputs.size()) + " outputs");
    for (size_t k = 0; k < outs.size(); ++k) outs[k] = c.conform(outs[k], k);
    vals[id] = std::move(outs);
  }

  // Every result goes through its own named identity: duplicated targets, targets that are
  // placeholders or constants, and assigned values then all get a distinct result tensor.
  NSMutableArray<MPSGraphTensor*>* targets = [NSMutableArray array];
  for (size_t k = 0; k < sg.targets.size(); ++k) {
    const ValueRef v = sg.targets[k];
    std::string name = "mg_out_" + std::to_string(k);
    MPSGraphTensor* t = [g identityWithTensor:vals[size_t(v.node)].at(size_t(v.index)) name:ns(name)];
    results.push_back({ResultSlot::Output, int64_t(k), G.type(v), t, name});
    [targets addObject:t];
  }
  for (size_t i = 0; i < assigns.size(); ++i) {
    std::string name = "mg_assign_" + std::to_string(i);
    MPSGraphTensor* t = [g identityWithTensor:assigns[i].value name:ns(name)];
    results.push_back({ResultSlot::Assign, assigns[i].var, assigns[i].type, t, name});
    [targets addObject:t];
  }
  graph_ = g;
  if (results.empty()) return;  // nothing to compute

  NSMutableDictionary<MPSGraphTensor*, MPSGraphShapedType*>* feed_types = [NSMutableDictionary dictionary];
  for (auto& f : feeds) feed_types[f.tensor] = [[MPSGraphShapedType alloc] initWithShape:f.tensor.shape dataType:f.tensor.dataType];
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
  for (auto& f : feeds_) [input_types addObject:[[MPSGraphShapedType alloc] initWithShape:f.tensor.shape dataType:f.tensor.dataType]];
  [exe specializeWithDevice:impl.graph_device inputTypes:input_types compilationDescriptor:cd];
  exe_ = exe;
}

MPSGraphTensorData* MetalProgram::wrap_input(const Array& a, MPSGraphTensor* t) {
  MetalDevice::Impl& impl = dev_->impl();
  const size_t nbytes = a.nbytes();
  id<MTLBuffer> b = buffer_of(a);  // our own MTLBuffer: no copy
  if (b == nil) {
    void* p = a.data();
    if (aligned_to(p, nbytes, impl.page_size) && nbytes <= impl.device.maxBufferLength)
      b = [impl.device newBufferWithBytesNoCopy:p length:nbytes options:MTLResourceStorageModeShared deallocator:nil];
    if (b == nil) b = [impl.device newBufferWithBytes:p length:nbytes options:MTLResourceStorageModeShared];  // one copy
    if (b == nil) raise(ErrorKind::Runtime, "run", "", "metal: out of device memory for an input of " + std::to_string(nbytes) + " bytes");
  }
  return [[MPSGraphTensorData alloc] initWithMTLBuffer:b shape:t.shape dataType:t.dataType];
}

MPSGraphTensorData* MetalProgram::wrap_result(const Array& a, MPSGraphTensor* t, const std::vector<const Array*>& ins,
                                              std::vector<Staged>& staged) {
  MetalDevice::Impl& impl = dev_->impl();
  const size_t nbytes = a.nbytes();
  bool alias = false;
  for (const Array* in : ins) alias = alias || overlaps(a, *in);
  id<MTLBuffer> b = alias ? nil : buffer_of(a);
  if (b == nil && !alias && aligned_to(a.data(), nbytes, impl.page_size) && nbytes <= impl.device.maxBufferLength)
    b = [impl.device newBufferWithBytesNoCopy:a.data() length:nbytes options:MTLResourceStorageModeShared deallocator:nil];
  if (b == nil) {
    b = [impl.device newBufferWithLength:nbytes options:MTLResourceStorageModeShared];
    if (b == nil) raise(ErrorKind::Runtime, "run", "", "metal: out of device memory for a result of " + std::to_string(nbytes) + " bytes");
    staged.push_back({b, a.data(), nbytes});
  }
  return [[MPSGraphTensorData alloc] initWithMTLBuffer:b shape:t.shape dataType:t.dataType];
}

void MetalProgram::run(const std::vector<std::shared_ptr<Array>>& inputs,
                       const std::vector<std::shared_ptr<Array>>& outputs) {
  if (inputs.size() != num_inputs_ || outputs.size() != num_outputs_)
    raise(ErrorKind::Value, "run", "", "metal program called with " + std::to_string(inputs.size()) + " inputs and " +
                                           std::to_string(outputs.size()) + " outputs, expected " +
                                           std::to_string(num_inputs_) + " and " + std::to_string(num_outputs_));
  if (!exe_) return;
  std::vector<std::shared_ptr<Array>> held;  // variable values read and written by this run
  std::vector<std::pair<int64_t, std::shared_ptr<Array>>> assigned;
  guarded("run", [&] {
    MetalDevice::Impl& impl = dev_->impl();
    NSMutableArray<MPSGraphTensorData*>* ins = [NSMutableArray arrayWithCapacity:feeds_.size()];
    std::vector<const Array*> in_arrays;
    for (auto& f : feeds_) {
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
      [ins addObject:wrap_input(*a, f.tensor)];
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
      [outs addObject:wrap_result(*a, r.tensor, in_arrays, staged)];
      out_arrays.push_back(a.get());
    }

    MPSGraphExecutableExecutionDescriptor* ed = [MPSGraphExecutableExecutionDescriptor new];
    ed.waitUntilCompleted = NO;
    dispatch_semaphore_t done = dispatch_semaphore_create(0);
    __block NSString* graph_error = nil;
    ed.completionHandler = ^(NSArray<MPSGraphTensorData*>* results, NSError* error) {
      if (error) graph_error = [error.localizedDescription copy];
      dispatch_semaphore_signal(done);
    };
    NSArray<MPSGraphTensorData*>* returned = nil;
    id<MTLCommandBuffer> root = nil;
    {
      std::lock_guard<std::mutex> lock(impl.encode_mu);  // one encoder at a time on the queue
      MPSCommandBuffer* cb = [MPSCommandBuffer commandBufferFromCommandQueue:impl.queue];
      returned = [exe_ encodeToCommandBuffer:cb inputsArray:ins resultsArray:outs executionDescriptor:ed];
      [cb commit];  // MPSGraph may have committed earlier buffers (commitAndContinue)
      root = cb.rootCommandBuffer;
    }
    [root waitUntilCompleted];  // Program::run is synchronous
    if (root.status == MTLCommandBufferStatusError) {
      NSString* why = root.error ? root.error.localizedDescription : @"unknown error";
      raise(ErrorKind::Runtime, "run", "", std::string("metal: the command buffer failed: ") + why.UTF8String);
    }
    dispatch_semaphore_wait(done, dispatch_time(DISPATCH_TIME_NOW, int64_t(5) * int64_t(NSEC_PER_SEC)));
    if (graph_error) raise(ErrorKind::Runtime, "run", "", std::string("metal: MPSGraph failed: ") + graph_error.UTF8String);

    for (auto& s : staged) std::memcpy(s.dst, s.buffer.contents, s.nbytes);
    if (returned && returned.count == outs.count) {  // results MPSGraph placed elsewhere: read them back
      for (NSUInteger i = 0; i < outs.count; ++i)
        if (returned[i] != outs[i]) [[returned[i] mpsndarray] readBytes:out_arrays[i]->data() strideBytes:nil];
    }
  });
  for (auto& a : assigned) vars_->set(a.first, a.second);  // assigns land when the run completes
}

}  // namespace

std::unique_ptr<Program> compile_program(const std::shared_ptr<MetalDevice>& device, const Specialised& sg) {
  if (validate(sg)) return backend_for(Device{DeviceKind::CPU, 0}).compile(sg);
  auto prog = std::make_unique<MetalProgram>(device, sg.vars);
  guarded("compile", [&] { prog->build(sg); });
  return prog;
}

}  // namespace mg::metal

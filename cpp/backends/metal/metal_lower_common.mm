// Shared helpers of the Metal lowering: dtype/shape mapping, the op table, constants and the
// small compositions that keep the CPU kernels' semantics (saturating casts, NaN rules).
#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <utility>
#include <variant>

#include "backends/metal/metal_internal.h"

namespace mg::metal {

// ---------------- dtypes, shapes, exceptions ----------------

MPSDataType mps_dtype(DType t, const std::string& op, const std::string& node) {
  switch (t) {
    case DType::Bool: return MPSDataTypeBool;
    case DType::Int8: return MPSDataTypeInt8;
    case DType::Int16: return MPSDataTypeInt16;
    case DType::Int32: return MPSDataTypeInt32;
    case DType::Int64:
      // many MPSGraph ops lacked 64-bit integer kernels before 13.3 (pytorch/pytorch#95817): refuse
      // rather than risk an assertion abort
      if (@available(macOS 13.3, *)) return MPSDataTypeInt64;
      raise(ErrorKind::NotImplemented, op, node, "int64 needs macOS 13.3 or newer on the metal backend");
    case DType::UInt8: return MPSDataTypeUInt8;
    case DType::UInt16: return MPSDataTypeUInt16;
    case DType::UInt32: return MPSDataTypeUInt32;
    case DType::UInt64:
      if (@available(macOS 13.3, *)) return MPSDataTypeUInt64;
      raise(ErrorKind::NotImplemented, op, node, "uint64 needs macOS 13.3 or newer on the metal backend");
    case DType::Float16: return MPSDataTypeFloat16;
    case DType::Float32: return MPSDataTypeFloat32;
    case DType::BFloat16:
      if (@available(macOS 14.0, *)) return MPSDataTypeBFloat16;
      raise(ErrorKind::NotImplemented, op, node, "bfloat16 needs macOS 14 or newer on the metal backend");
    case DType::Complex64:
      if (@available(macOS 14.0, *)) return MPSDataTypeComplexFloat32;
      raise(ErrorKind::NotImplemented, op, node, "complex64 needs macOS 14 or newer on the metal backend");
    case DType::Complex128:
      raise(ErrorKind::Type, op, node, "complex128 is not supported by MPSGraph; cast to complex64");
    case DType::Float64:
      break;
  }
  raise(ErrorKind::Type, op, node, "float64 is not supported by MPSGraph; cast to float32");
}

MPSShape* mps_shape(const Shape& s) {
  if (s.empty()) return @[ @1 ];
  NSMutableArray<NSNumber*>* a = [NSMutableArray arrayWithCapacity:s.size()];
  for (int64_t d : s) [a addObject:@(d)];
  return a;
}

bool is_float_dtype(DType t) { return is_floating(t); }
int dtype_bits(DType t) { return int(dtype_size(t) * 8); }

void guarded(const char* what, const std::function<void()>& f) {
  std::exception_ptr cpp_error;
  std::string objc_error;
  @autoreleasepool {
    try {
      @try {
        f();
      } @catch (NSException* e) {
        objc_error = std::string(e.name ? e.name.UTF8String : "NSException") + ": " +
                     (e.reason ? e.reason.UTF8String : "(no reason given)");
      } @catch (id e) {
        objc_error = "an Objective-C exception";
      }
    } catch (...) {
      cpp_error = std::current_exception();
    }
  }  // the pool is drained before anything propagates
  if (cpp_error) std::rethrow_exception(cpp_error);
  if (!objc_error.empty()) raise(ErrorKind::Runtime, what, "", "MPSGraph raised " + objc_error);
}

// ---------------- op table ----------------

namespace {
std::unordered_map<std::string, LowerFn>& table() {
  static std::unordered_map<std::string, LowerFn> t;
  return t;
}
std::unordered_map<std::string, ClaimFn>& claims() {
  static std::unordered_map<std::string, ClaimFn> t;
  return t;
}
void ensure_registered() {
  static bool done = [] {
    register_elementwise_lowerings();
    register_reduction_lowerings();
    register_matmul_lowerings();
    register_shape_lowerings();
    register_creation_lowerings();
    register_random_lowerings();
    register_convolution_lowerings();
    register_pooling_lowerings();
    register_resize_lowerings();
    register_sparse_lowerings();
    register_gather_lowerings();
    register_sort_lowerings();
    register_linalg_lowerings();
    register_image_lowerings();
    register_quantization_lowerings();
    register_control_flow_lowerings();
    register_nn_lowerings();
    register_fft_lowerings();
    register_attention_lowerings();
    register_rnn_lowerings();
    return true;
  }();
  (void)done;
}
}  // namespace

void register_lowering(const std::string& op, LowerFn fn) { table()[op] = std::move(fn); }

const LowerFn* find_lowering(const std::string& op) {
  ensure_registered();
  auto it = table().find(op);
  return it == table().end() ? nullptr : &it->second;
}

void register_composite_lowering(const std::string& op, ClaimFn claim, LowerFn fn) {
  claims()[op] = std::move(claim);
  register_lowering(op, std::move(fn));
}

bool claims_composite(const Node& node) {
  ensure_registered();
  auto it = claims().find(node.op->name);
  return it != claims().end() && it->second(node);
}

// ---------------- LowerCtx ----------------

LowerCtx::LowerCtx(MPSGraph* graph, const Node& n, std::vector<MPSGraphTensor*> inputs, std::vector<TensorType> types,
                   std::vector<std::shared_ptr<const Array>>* keep, std::function<MPSGraphTensor*()> run_counter)
    : g(graph), node(n), op(n.op->name), in(std::move(inputs)), in_types(std::move(types)), out_types(n.outputs),
      keep_alive(keep), run_counter_(std::move(run_counter)) {}

MPSGraphTensor* LowerCtx::run_counter() {
  if (!run_counter_) fail(ErrorKind::NotImplemented, "a stateful op is not implemented here on the metal backend (no run counter)");
  return run_counter_();
}

ConstantEvaluator& LowerCtx::evaluator() const {
  if (!host_evaluator) fail(ErrorKind::Runtime, "internal error: the metal program was compiled without a constant evaluator");
  return *host_evaluator;
}

void LowerCtx::fail(ErrorKind kind, const std::string& msg) const { raise(kind, op, node.name, msg); }

void LowerCtx::needs_macos(const char* version, const std::string& what) const {
  fail(ErrorKind::NotImplemented, what + " needs macOS " + version + " or newer on the metal backend");
}

MPSGraphTensor* LowerCtx::constant_bytes(const void* data, size_t nbytes, const Shape& shape, DType t) {
  NSData* d = [NSData dataWithBytes:data length:nbytes];
  return [g constantWithData:d shape:mps_shape(shape) dataType:mps_dtype(t, op, node.name)];
}

MPSGraphTensor* LowerCtx::k(double v, DType t) {
  uint64_t buf = 0;
  store_from_double(&buf, t, 0, v);
  return constant_bytes(&buf, dtype_size(t), Shape{}, t);
}

MPSGraphTensor* LowerCtx::k_int(int64_t v, DType t) {
  unsigned char buf[8] = {0};
  switch (t) {
    case DType::Bool: { bool b = v != 0; std::memcpy(buf, &b, 1); break; }
    case DType::Int8: { int8_t x = int8_t(v); std::memcpy(buf, &x, 1); break; }
    case DType::Int16: { int16_t x = int16_t(v); std::memcpy(buf, &x, 2); break; }
    case DType::Int32: { int32_t x = int32_t(v); std::memcpy(buf, &x, 4); break; }
    case DType::Int64: { std::memcpy(buf, &v, 8); break; }
    case DType::UInt8: { uint8_t x = uint8_t(v); std::memcpy(buf, &x, 1); break; }
    case DType::UInt16: { uint16_t x = uint16_t(v); std::memcpy(buf, &x, 2); break; }
    case DType::UInt32: { uint32_t x = uint32_t(v); std::memcpy(buf, &x, 4); break; }
    case DType::UInt64: { uint64_t x = uint64_t(v); std::memcpy(buf, &x, 8); break; }
    default: return k(double(v), t);
  }
  return constant_bytes(buf, dtype_size(t), Shape{}, t);
}

MPSGraphTensor* LowerCtx::k_limit(DType t, bool max) {
  unsigned char buf[8] = {0};
  auto put = [&](auto lo, auto hi) {
    auto v = max ? hi : lo;
    std::memcpy(buf, &v, sizeof(v));
  };
  switch (t) {
    case DType::Int8: put(std::numeric_limits<int8_t>::min(), std::numeric_limits<int8_t>::max()); break;
    case DType::Int16: put(std::numeric_limits<int16_t>::min(), std::numeric_limits<int16_t>::max()); break;
    case DType::Int32: put(std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()); break;
    case DType::Int64: put(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()); break;
    case DType::UInt8: put(std::numeric_limits<uint8_t>::min(), std::numeric_limits<uint8_t>::max()); break;
    case DType::UInt16: put(std::numeric_limits<uint16_t>::min(), std::numeric_limits<uint16_t>::max()); break;
    case DType::UInt32: put(std::numeric_limits<uint32_t>::min(), std::numeric_limits<uint32_t>::max()); break;
    case DType::UInt64: put(std::numeric_limits<uint64_t>::min(), std::numeric_limits<uint64_t>::max()); break;
    default: fail(ErrorKind::Type, "internal: k_limit of a non-integer dtype");
  }
  return constant_bytes(buf, dtype_size(t), Shape{}, t);
}

MPSGraphTensor* LowerCtx::fill(double v, const TensorType& t) { return broadcast(k(v, t.dtype), t.shape); }

MPSGraphTensor* LowerCtx::add(MPSGraphTensor* a, MPSGraphTensor* b) {
  return [g additionWithPrimaryTensor:a secondaryTensor:b name:nil];
}
MPSGraphTensor* LowerCtx::sub(MPSGraphTensor* a, MPSGraphTensor* b) {
  return [g subtractionWithPrimaryTensor:a secondaryTensor:b name:nil];
}
MPSGraphTensor* LowerCtx::mul(MPSGraphTensor* a, MPSGraphTensor* b) {
  return [g multiplicationWithPrimaryTensor:a secondaryTensor:b name:nil];
}
MPSGraphTensor* LowerCtx::div(MPSGraphTensor* a, MPSGraphTensor* b) {
  return [g divisionWithPrimaryTensor:a secondaryTensor:b name:nil];
}
MPSGraphTensor* LowerCtx::sel(MPSGraphTensor* p, MPSGraphTensor* a, MPSGraphTensor* b) {
  return [g selectWithPredicateTensor:p truePredicateTensor:a falsePredicateTensor:b name:nil];
}
MPSGraphTensor* LowerCtx::eq(MPSGraphTensor* a, MPSGraphTensor* b) {
  return [g equalWithPrimaryTensor:a secondaryTensor:b name:nil];
}
MPSGraphTensor* LowerCtx::ne(MPSGraphTensor* a, MPSGraphTensor* b) {
  return [g notEqualWithPrimaryTensor:a secondaryTensor:b name:nil];
}
MPSGraphTensor* LowerCtx::lt(MPSGraphTensor* a, MPSGraphTensor* b) {
  return [g lessThanWithPrimaryTensor:a secondaryTensor:b name:nil];
}
MPSGraphTensor* LowerCtx::le(MPSGraphTensor* a, MPSGraphTensor* b) {
  return [g lessThanOrEqualToWithPrimaryTensor:a secondaryTensor:b name:nil];
}
MPSGraphTensor* LowerCtx::gt(MPSGraphTensor* a, MPSGraphTensor* b) {
  return [g greaterThanWithPrimaryTensor:a secondaryTensor:b name:nil];
}
MPSGraphTensor* LowerCtx::ge(MPSGraphTensor* a, MPSGraphTensor* b) {
  return [g greaterThanOrEqualToWithPrimaryTensor:a secondaryTensor:b name:nil];
}
MPSGraphTensor* LowerCtx::land(MPSGraphTensor* a, MPSGraphTensor* b) {
  return [g logicalANDWithPrimaryTensor:a secondaryTensor:b name:nil];
}
MPSGraphTensor* LowerCtx::lor(MPSGraphTensor* a, MPSGraphTensor* b) {
  return [g logicalORWithPrimaryTensor:a secondaryTensor:b name:nil];
}
MPSGraphTensor* LowerCtx::lnot(MPSGraphTensor* a) { return [g notWithTensor:a name:nil]; }
MPSGraphTensor* LowerCtx::isnan(MPSGraphTensor* a) { return [g isNaNWithTensor:a name:nil]; }

MPSGraphTensor* LowerCtx::max_nan(MPSGraphTensor* a, MPSGraphTensor* b, DType t) {
  // The NaN-propagating variants assert on integer dtypes (PyTorch saw it on macOS 15.1).
  if (is_float_dtype(t)) return [g maximumWithNaNPropagationWithPrimaryTensor:a secondaryTensor:b name:nil];
  return [g maximumWithPrimaryTensor:a secondaryTensor:b name:nil];
}
MPSGraphTensor* LowerCtx::min_nan(MPSGraphTensor* a, MPSGraphTensor* b, DType t) {
  if (is_float_dtype(t)) return [g minimumWithNaNPropagationWithPrimaryTensor:a secondaryTensor:b name:nil];
  return [g minimumWithPrimaryTensor:a secondaryTensor:b name:nil];
}

MPSGraphTensor* LowerCtx::raw_cast(MPSGraphTensor* x, DType to) {
  MPSDataType t = mps_dtype(to, op, node.name);
  if (x.dataType == t) return x;
  return [g castTensor:x toType:t name:nil];
}

namespace {
// float(min) / float(max) of an integer dtype, computed as the CPU kernel's `From(limit)`
// (half and bfloat16 compute in float there, so float is right for all three).
void float_limits(DType t, float& lo, float& hi) {
  switch (t) {
    case DType::Int8: lo = float(std::numeric_limits<int8_t>::min()); hi = float(std::numeric_limits<int8_t>::max()); break;
    case DType::Int16: lo = float(std::numeric_limits<int16_t>::min()); hi = float(std::numeric_limits<int16_t>::max()); break;
    case DType::Int32: lo = float(std::numeric_limits<int32_t>::min()); hi = float(std::numeric_limits<int32_t>::max()); break;
    case DType::Int64: lo = float(std::numeric_limits<int64_t>::min()); hi = float(std::numeric_limits<int64_t>::max()); break;
    case DType::UInt8: lo = 0.f; hi = float(std::numeric_limits<uint8_t>::max()); break;
    case DType::UInt16: lo = 0.f; hi = float(std::numeric_limits<uint16_t>::max()); break;
    case DType::UInt32: lo = 0.f; hi = float(std::numeric_limits<uint32_t>::max()); break;
    default: lo = 0.f; hi = float(std::numeric_limits<uint64_t>::max()); break;
  }
}
}  // namespace

// int32 <-> uint32 with the bits kept, from casts of in-range values only (castTensor's
// behaviour out of range is not documented): a negative int32 x is (x + INT_MAX) + 1 + 2**31.
MPSGraphTensor* LowerCtx::int32_bits_to_uint32(MPSGraphTensor* x) {
  MPSGraphTensor* neg = lt(x, k_int(0, DType::Int32));
  MPSGraphTensor* low = sel(neg, add(add(x, k_int(2147483647, DType::Int32)), k_int(1, DType::Int32)), x);  // >= 0
  MPSGraphTensor* u = raw_cast(low, DType::UInt32);
  return sel(neg, add(u, k_int(int64_t(1) << 31, DType::UInt32)), u);
}
MPSGraphTensor* LowerCtx::uint32_bits_to_int32(MPSGraphTensor* x) {
  MPSGraphTensor* high = ge(x, k_int(int64_t(1) << 31, DType::UInt32));
  MPSGraphTensor* low = sel(high, sub(x, k_int(int64_t(1) << 31, DType::UInt32)), x);  // < 2**31
  MPSGraphTensor* s = raw_cast(low, DType::Int32);
  return sel(high, add(s, k_int(std::numeric_limits<int32_t>::min(), DType::Int32)), s);
}

// An integer cast between dtypes of at most 32 bits that narrows or changes signedness, with
// numpy's wrap, computed in int32 / uint32 only: every castTensor here converts a value that
// fits its target, so the result does not depend on how MPSGraph treats out-of-range casts,
// and no int64 tensor is made (many int64 kernels are missing before macOS 13.3).
MPSGraphTensor* LowerCtx::wrap_narrow(MPSGraphTensor* x, DType from, DType to) {
  const int tb = dtype_bits(to);
  if (to == DType::UInt32) return int32_bits_to_uint32(raw_cast(x, DType::Int32));  // from a signed type
  MPSGraphTensor* w;  // int32 holding the value's low 32 bits
  if (from == DType::UInt32) {
    if (to == DType::Int32) return uint32_bits_to_int32(x);
    w = raw_cast([g bitwiseANDWithPrimaryTensor:x secondaryTensor:k_int((int64_t(1) << tb) - 1, DType::UInt32) name:nil],
                 DType::Int32);
  } else {
    w = raw_cast(x, DType::Int32);  // exact: every other source fits int32
    if (to == DType::Int32) return w;
    w = [g bitwiseANDWithPrimaryTensor:w secondaryTensor:k_int((int64_t(1) << tb) - 1, DType::Int32) name:nil];
  }
  if (is_signed_integer(to))
    w = sel(ge(w, k_int(int64_t(1) << (tb - 1), DType::Int32)), sub(w, k_int(int64_t(1) << tb, DType::Int32)), w);
  return raw_cast(w, to);
}

MPSGraphTensor* LowerCtx::convert(MPSGraphTensor* x, DType from, DType to) {
  if (from == to) return x;
  if (to == DType::Bool) return ne(x, k(0, from));  // NaN != 0 is True, as on the CPU
  if (from == DType::Bool) return raw_cast(x, to);
  if (is_float_dtype(from) && is_float_dtype(to)) return raw_cast(x, to);
  if (!is_float_dtype(from) && is_float_dtype(to)) return raw_cast(x, to);
  if (is_float_dtype(from)) {
    // float -> integer: truncate toward zero, saturate at the range, NaN -> 0.
    MPSGraphTensor* xf = from == DType::Float32 ? x : raw_cast(x, DType::Float32);
    float lo, hi;
    float_limits(to, lo, hi);
    MPSGraphTensor* klo = k(lo, DType::Float32);
    MPSGraphTensor* khi = k(hi, DType::Float32);
    MPSGraphTensor* safe = sel(isnan(xf), k(0, DType::Float32), xf);
    safe = [g maximumWithPrimaryTensor:safe secondaryTensor:klo name:nil];
    safe = [g minimumWithPrimaryTensor:safe secondaryTensor:khi name:nil];
    MPSGraphTensor* r;
    if (dtype_size(to) < 4) r = raw_cast(raw_cast(safe, DType::Int32), to);  // float -> (u)int8/16 via int32
    else r = raw_cast(safe, to);
    r = sel(ge(xf, khi), k_limit(to, true), r);
    r = sel(le(xf, klo), k_limit(to, false), r);
    return sel(isnan(xf), k_int(0, to), r);
  }
  // integer -> integer, two's-complement wrap as numpy.
  const bool from_signed = is_signed_integer(from), to_signed = is_signed_integer(to);
  const int fb = dtype_bits(from), tb = dtype_bits(to);
  if ((from_signed == to_signed && tb >= fb) || (!from_signed && to_signed && tb > fb)) return raw_cast(x, to);
  if (fb <= 32 && tb <= 32) return wrap_narrow(x, from, to);  // no int64 (13.0-13.2 lack many int64 kernels)
  MPSGraphTensor* w;  // the value's bits as int64
  if (from == DType::UInt64 || to == DType::UInt64) {
    if (@available(macOS 13.2, *)) {
      w = from == DType::UInt64 ? [g reinterpretCastTensor:x toType:MPSDataTypeInt64 name:nil] : raw_cast(x, DType::Int64);
      if (to == DType::UInt64) return [g reinterpretCastTensor:w toType:MPSDataTypeUInt64 name:nil];
    } else {
      needs_macos("13.2", "casting between uint64 and other integer dtypes");
    }
  } else {
    w = raw_cast(x, DType::Int64);
  }
  if (tb == 64) return raw_cast(w, to);  // int64 (or uint64, handled above)
  MPSGraphTensor* m = [g bitwiseANDWithPrimaryTensor:w secondaryTensor:k_int((int64_t(1) << tb) - 1, DType::Int64) name:nil];
  if (to_signed)
    m = sel(ge(m, k_int(int64_t(1) << (tb - 1), DType::Int64)), sub(m, k_int(int64_t(1) << tb, DType::Int64)), m);
  return raw_cast(m, to);
}

MPSGraphTensor* LowerCtx::reshape(MPSGraphTensor* x, const Shape& shape) {
  MPSShape* s = mps_shape(shape);
  if (x.shape && [x.shape isEqualToArray:s]) return x;
  return [g reshapeTensor:x withShape:s name:nil];
}

MPSGraphTensor* LowerCtx::broadcast(MPSGraphTensor* x, const Shape& shape) {
  MPSShape* s = mps_shape(shape);
  if (x.shape && [x.shape isEqualToArray:s]) return x;
  return [g broadcastTensor:x toShape:s name:nil];
}

MPSGraphTensor* LowerCtx::conform(MPSGraphTensor* x, size_t kk) {
  const TensorType& t = out(kk);
  x = raw_cast(x, t.dtype);
  MPSShape* want = mps_shape(t.shape);
  MPSShape* have = x.shape;
  if (have && [have isEqualToArray:want]) return x;
  if (have) {
    int64_t n = 1;
    for (NSNumber* d : have) n *= d.longLongValue;
    int64_t m = 1;
    for (NSNumber* d : want) m *= d.longLongValue;
    if (n != m) return [g broadcastTensor:x toShape:want name:nil];
  }
  return [g reshapeTensor:x withShape:want name:nil];
}

// ---------------- shape helpers ----------------

MPSGraphTensor* LowerCtx::constant_vector(const std::vector<double>& values, const Shape& shape, DType t) {
  if (int64_t(values.size()) != num_elements(shape)) fail(ErrorKind::Runtime, "internal: constant of the wrong size");
  std::vector<unsigned char> buf(std::max<size_t>(values.size(), 1) * dtype_size(t));
  for (size_t i = 0; i < values.size(); ++i) store_from_double(buf.data(), t, int64_t(i), values[i]);
  return constant_bytes(buf.data(), values.size() * dtype_size(t), shape, t);
}

MPSGraphTensor* LowerCtx::constant_ints(const std::vector<int64_t>& values, const Shape& shape, DType t) {
  if (int64_t(values.size()) != num_elements(shape)) fail(ErrorKind::Runtime, "internal: constant of the wrong size");
  const size_t es = dtype_size(t);
  std::vector<unsigned char> buf(std::max<size_t>(values.size(), 1) * es);
  for (size_t i = 0; i < values.size(); ++i) {
    const int64_t v = values[i];
    unsigned char* p = buf.data() + i * es;
    switch (t) {
      case DType::Int8: { int8_t x = int8_t(v); std::memcpy(p, &x, 1); break; }
      case DType::Int16: { int16_t x = int16_t(v); std::memcpy(p, &x, 2); break; }
      case DType::Int32: { int32_t x = int32_t(v); std::memcpy(p, &x, 4); break; }
      case DType::Int64: { std::memcpy(p, &v, 8); break; }
      case DType::UInt8: { uint8_t x = uint8_t(v); std::memcpy(p, &x, 1); break; }
      case DType::UInt16: { uint16_t x = uint16_t(v); std::memcpy(p, &x, 2); break; }
      case DType::UInt32: { uint32_t x = uint32_t(v); std::memcpy(p, &x, 4); break; }
      case DType::UInt64: { uint64_t x = uint64_t(v); std::memcpy(p, &x, 8); break; }
      default: store_from_double(buf.data(), t, int64_t(i), double(v)); break;
    }
  }
  return constant_bytes(buf.data(), values.size() * es, shape, t);
}

MPSGraphTensor* LowerCtx::constant_bools(const std::vector<bool>& values, const Shape& shape) {
  if (int64_t(values.size()) != num_elements(shape)) fail(ErrorKind::Runtime, "internal: constant of the wrong size");
  std::vector<unsigned char> buf(std::max<size_t>(values.size(), 1));
  for (size_t i = 0; i < values.size(); ++i) buf[i] = values[i] ? 1 : 0;
  return constant_bytes(buf.data(), values.size(), shape, DType::Bool);
}

MPSGraphTensor* LowerCtx::slice_axis(MPSGraphTensor* x, const Shape& xs, int64_t axis, int64_t start, int64_t step,
                                     int64_t count) {
  if (count <= 0 || start < 0 || start + (count - 1) * step >= xs[size_t(axis)])
    fail(ErrorKind::Runtime, "internal: slice out of range in the metal lowering");
  if (start == 0 && count == xs[size_t(axis)] && (step == 1 || count == 1)) return x;
  if (step == 1 || count == 1)
    return [g sliceTensor:x dimension:NSUInteger(axis) start:start length:count name:nil];
  NSMutableArray<NSNumber*>* starts = [NSMutableArray array];
  NSMutableArray<NSNumber*>* ends = [NSMutableArray array];
  NSMutableArray<NSNumber*>* strides = [NSMutableArray array];
  for (size_t i = 0; i < xs.size(); ++i) {
    const bool a = int64_t(i) == axis;
    [starts addObject:@(a ? start : 0)];
    [ends addObject:@(a ? start + (count - 1) * step + 1 : xs[i])];
    [strides addObject:@(a ? step : 1)];
  }
  return [g sliceTensor:x starts:starts ends:ends strides:strides name:nil];
}

MPSGraphTensor* LowerCtx::pad_axis(MPSGraphTensor* x, const Shape& xs, int64_t axis, int64_t before, int64_t after,
                                   double value) {
  if (before == 0 && after == 0) return x;
  NSMutableArray<NSNumber*>* lo = [NSMutableArray array];
  NSMutableArray<NSNumber*>* hi = [NSMutableArray array];
  for (size_t i = 0; i < xs.size(); ++i) {
    const bool a = int64_t(i) == axis;
    [lo addObject:@(a ? before : 0)];
    [hi addObject:@(a ? after : 0)];
  }
  return [g padTensor:x withPaddingMode:MPSGraphPaddingModeConstant leftPadding:lo rightPadding:hi constantValue:value
                 name:nil];
}

}  // namespace mg::metal

// CPU kernels for the convolution primitives (convolution, convolution_data_gradient,
// convolution_weights_gradient): im2col + GEMM over any number of spatial dims, grouped.
//
// The factory fixes the geometry: for the innermost spatial dim, the range of output positions
// each kernel tap reads inside the source (the rest is padding); for the outer dims, a table of
// the source row each (outer kernel tap, output row) reads, or -1 in the padding. A run gathers
// column tiles (channels x taps, a block of output positions) with those tables and multiplies
// them by the weights with BLAS; the data gradient multiplies by the transposed weights and
// scatters the columns back (col2im); the weights gradient accumulates dy @ columns^T. 1x1
// convolutions with unit strides and no padding use the source as the column matrix.
// Depthwise forward convolutions accumulate shifted source rows (no columns); 3x3 ones in
// float32 run one pass per output row (conv_depthwise.h) with a bias + clamp epilogue folded in.
// A forward float32 convolution may carry an epilogue (conv_epilogue.h), applied to each block
// of output rows right after it is written; with constant weights (one group) the GEMM is
// conv_gemm_packed.h's (weights packed at compile, its bias and clamp folded into the store).
// float16/bfloat16 compute in float32 scratch from the program's memory plan. Small products go over the
// project's pool as (image x group, tile) units with BLAS on the calling thread, and so do large
// ones with packed weights where there are units enough to share; others run one image at a
// time, the gathers and then the product split over the pool.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "backends/cpu/avx2_pairs.h"
#include "backends/cpu/blas_gemm.h"
#include "backends/cpu/conv_depthwise.h"
#include "backends/cpu/conv_epilogue.h"
#include "backends/cpu/conv_gemm_packed.h"
#include "backends/cpu/conv_winograd.h"
#include "backends/cpu/elementwise_util.h"
#include "backends/cpu/isa_target.h"
#include "backends/cpu/unit_shares.h"
#include "core/ops/convolution_attrs.h"

#if MG_CPU_X86
#include <immintrin.h>
#endif


namespace mg::cpu {

namespace {

using Ints = std::vector<int64_t>;

// Row-major C = op(A) @ op(B) + beta * C with op(A) (M, K), op(B) (K, N): over the pool when
// large (a call from inside a pool task stays on its thread).
template <class T>
inline void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb,
                 T beta, T* C, int64_t ldc) {
  gemm_on_pool(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

enum class Kind { Forward, Data, Weights };

// Products with small weights (Og * CK) go over the pool as units of about this many
// multiply-adds, each one single-threaded BLAS call; larger ones one item at a time, each
// product split over the pool by gemm_on_pool.
constexpr int64_t kUnitWork = int64_t(1) << 20;
// Depth parts (Plan::depth_parts) for products of at most this many positions (16x16), each
// part at least this deep (the AVX-512 planes kernel's depth block)
constexpr int64_t kDepthPartsPositions = 256, kDepthPartsMinDepth = 128;
// column elements per tile of an item's product (its GEMM split over the pool): the columns
// stay in cache between im2col and the GEMM
constexpr int64_t kColumnBudget = int64_t(1) << 18;
constexpr int64_t kWidePositions = 384;  // GEMM columns that batching images aims for
constexpr int64_t kPackedMinColumns = 512;  // columns from which the packed planes layout is used at any depth
// and from which at depths up to this (128: MobileNetV2's 28x28 1x1 layers at batch 1 in tiles
// of 144 columns ran 1.3-1.45x faster in planes than along the channels)
constexpr int64_t kPlanesMinColumns = 128, kPlanesMaxDepth = 1024;
// Outputs of more bytes than the last-level cache a core sees are stored past the caches
// (Plan::stream_out). Linux says its size in sysfs (32 MiB on the 2-core development machine,
// whose CPUID and sysconf report the whole socket's 256); 32 MiB where it cannot be read.
int64_t stream_bytes() {
  static const int64_t bytes = [] {
    int64_t b = int64_t(32) << 20;
    // stdio, not an ifstream: formatted stream input crashed in libstdc++'s locale code in
    // builds on the GPU machines (CONTRIBUTING.md: no iostreams in the core)
    if (std::FILE* f = std::fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r")) {
      long long v = 0;
      char unit = 0;
      const int got = std::fscanf(f, "%lld%c", &v, &unit);
      std::fclose(f);
      if (got >= 1 && v > 0) b = unit == 'K' ? int64_t(v) << 10 : unit == 'M' ? int64_t(v) << 20 : int64_t(v);
    }
    return b;
  }();
  return bytes;
}

// d[j] = s[2 * j] for j < n (stride-2 im2col rows: the stems). With AVX2, 8 at a time from two
// loads and two shuffles instead of 8 scalar copies; the loads stop before reading past s[2n - 2].
using Stride2Fn = void (*)(const float*, float*, int64_t);
void stride2_generic(const float* s, float* d, int64_t n) {
  for (int64_t j = 0; j < n; ++j) d[j] = s[2 * j];
}
#if MG_CPU_X86
MG_TARGET_AVX2 void stride2_avx2(const float* s, float* d, int64_t n) {
  int64_t j = 0;
  for (; j + 9 <= n; j += 8) {
    const __m256 a = _mm256_loadu_ps(s + 2 * j), b = _mm256_loadu_ps(s + 2 * j + 8);
    store_in_order(d + j, evens_or_odds(a, b, true));
  }
  for (; j < n; ++j) d[j] = s[2 * j];
}
#endif
Stride2Fn stride2_fn() {
#if MG_CPU_X86
  if (best_isa() != Isa::Generic) return stride2_avx2;
#endif
  return stride2_generic;
}

struct Plan {
  Kind kind = Kind::Forward;
  int64_t N = 0, C = 0, O = 0, G = 1, Cg = 0, Og = 0;
  int64_t in_plane = 0;    // source elements per channel
  int64_t P = 0;           // output positions per channel
  int64_t OL = 0, IL = 0;  // innermost output / source extent
  int64_t R = 0;           // output rows (P / OL)
  int64_t KL = 0, Kouter = 0, Ksz = 0, CK = 0;
  int64_t sL = 1;          // innermost stride
  Ints rowtab;             // Kouter * R: source offset of the row read, -1 in the padding
  Ints lo, hi, start;      // per innermost tap: valid output range [lo, hi) and its first source position
  bool direct = false;     // 1x1, unit strides, no padding: the source plane is the column matrix
  bool depthwise = false;  // forward with one source channel per group: depthwise()
  bool dw3 = false;        // depthwise 2-d 3x3, innermost dilation 1, stride 1 or 2: depthwise3x3()
  bool dw3_flat = false;   // dw3 with unit strides and dilations and OL == IL: rows run as one
  bool dw3_border = false; // dw3 on narrow planes, equal strides: through a zero-bordered copy
  int64_t Wb = 0, Hb = 0;  // dw3_border: the bordered plane's width and height
  bool dw3_phase = false;  // dw3_border at stride 2: the bordered plane's even rows, then its odd ones
  bool dw3_s1_avx2 = true;  // dw3: conv_depthwise.h's AVX2 stride-1 rows by hand (MPSGRAPH_CPU_DW3_S1_AVX2=0: compiled)
  // dw3 on AVX-512, rows of 8 outputs or more: the 16-lane planes and stride-2 rows (MPSGRAPH_CPU_DW3_AVX512=0:
  // 8-lane). MobileNetV2 at batch 1: its stride-1 layers 1.1-1.25x in the network, stride-2 level to 1.05x;
  // at batch 8 level. Rows of 4 to 7 ran 1.3x slower as one masked 16-lane vector than as 8-lane ones.
  bool dw3_avx512 = true;
  bool dw3_row_pairs = false;  // dw3_border at stride 1 (up to 127 wide): Dw3PlaneFn's row pairs, into the output
  bool dw3_phase_pairs = false;  // dw3_phase: Dw3PhasePlaneFn's row pairs, straight into the output
  bool dw3_block16 = false;  // dw3_border, one output channel per group: Dw3Block16Fn, 16 channels at once
  bool dw3_prefetch = false;  // dw3 rows read in place: the next channel's source prefetched (x86)
  int64_t pbL = 0, pbT = 0;  // padding before, innermost and outer (2-d)
  std::shared_ptr<const std::vector<float>> zeros;  // dw3: a source row of zeros (rows in the padding)
  int64_t tile = 1;        // output positions per column tile
  int64_t ntiles = 0;
  bool ours = false;       // units split over the pool (BLAS single-threaded), else BLAS threads
  // packed direct forward of one image, O >= 4 CK (expansions): threads split the output channels
  bool split_channels = false;
  // packed direct forward of one image over a few positions, K >= 2 O (projections): part t of
  // the depth is thread t's product over all of C, the parts summed after (> 1: the parts)
  int depth_parts = 0;
  // depth parts in the channels layout: part t's weights packed on their own (then `packed` is
  // part 0's); empty in planes, whose parts share the whole depth's panels
  std::vector<std::shared_ptr<const PackedWeights>> part_weights;
  bool own_shares = false;  // ours: each thread claims its own contiguous share of the units first (unit_shares.h)
  bool tiles_parallel = false;  // a unit is one (item, tile); else one item with all its tiles
  int slots = 1;           // scratch slots
  int64_t col_elems = 0;   // per slot
  int64_t images = 1;      // > 1: forward products of this many images' columns side by side (few positions each)
  std::shared_ptr<const PackedWeights> packed;  // forward float32, constant weights, one group: packed at compile
  bool stream_out = false;  // packed: the output, larger than L3, stored past the caches (PackedStore::stream)
  // the epilogue's 2x2 pool (conv_epilogue.h): tiles of whole row pairs, each written to a block
  // of its slot's and pooled from there into the output (the pooled one)
  bool pool_tiles = false;
  Stride2Fn stride2 = nullptr;  // float32 im2col rows of innermost stride 2
  int64_t items() const { return N * G; }
  int64_t units() const { return tiles_parallel ? items() * ntiles : items(); }
};

// packed: forward weights that will be packed at compile (float32 graph constants, one group).
Plan make_plan(Kind kind, const Node& node, const Shape& src, const Shape& w, const Shape& dy, bool packed = false) {
  const ops::ConvolutionAttrs& a = typed_attrs<ops::ConvolutionAttrs>(node);
  const Ints& strides = a.strides;
  const Ints& dil = a.dilation_rates;
  const Ints& pads = a.padding;
  const int64_t groups = a.groups;
  const size_t k = src.size() - 2;
  if (strides.size() != k || dil.size() != k || pads.size() != 2 * k || w.size() != k + 2 || dy.size() != k + 2 ||
      groups < 1)
    raise(ErrorKind::Runtime, node.op->name, node.name, "convolution attributes were not resolved for these shapes");
  Plan p;
  p.kind = kind;
  p.N = src[0];
  p.C = src[1];
  p.O = w[0];
  p.G = groups;
  p.Cg = p.C / groups;
  p.Og = p.O / groups;
  p.in_plane = 1;
  p.P = 1;
  p.Ksz = 1;
  for (size_t i = 0; i < k; ++i) {
    p.in_plane *= src[2 + i];
    p.P *= dy[2 + i];
    p.Ksz *= w[2 + i];
  }
  p.CK = p.Cg * p.Ksz;
  p.OL = dy.back();
  p.IL = src.back();
  p.KL = w.back();
  p.Kouter = p.KL ? p.Ksz / p.KL : 0;
  p.R = p.OL ? p.P / p.OL : 0;
  p.sL = strides.back();
  p.stride2 = stride2_fn();
  if (std::max({p.CK, p.P, p.Og, p.in_plane, p.O * p.CK}) > INT_MAX)
    raise(ErrorKind::NotImplemented, node.op->name, node.name, "convolution dims beyond 2**31-1 elements per matrix are not supported");

  p.direct = p.Ksz == 1;
  for (size_t i = 0; i < k; ++i) p.direct = p.direct && strides[i] == 1 && pads[2 * i] == 0 && pads[2 * i + 1] == 0;

  p.depthwise = kind == Kind::Forward && p.Cg == 1 && p.G > 1 && !p.direct;
  // MPSGRAPH_CPU_DW3=0 keeps the generic depthwise loop (read at compile: tests compare both)
  p.dw3 = p.depthwise && k == 2 && p.KL == 3 && p.Kouter == 3 && dil.back() == 1 && dw3_row_fn(p.sL) &&
          !switched_off("MPSGRAPH_CPU_DW3");
  p.pbL = pads[2 * (k - 1)];
  p.pbT = k == 2 ? pads[0] : 0;
  p.dw3_flat = p.dw3 && strides[0] == 1 && dil[0] == 1 && p.sL == 1 && p.OL == p.IL;
  // the row-pair planes take rows of 4 to 7 outputs as one vector each (MPSGRAPH_CPU_DW3_NARROW_ROWS=0:
  // 8 and more only; MobileNetV2's 7x7 planes then keep the flat loop and its copy out)
  const int64_t min_ol = switched_off("MPSGRAPH_CPU_DW3_NARROW_ROWS") ? 8 : 4;
  // MPSGRAPH_CPU_DW3_ROW_PAIRS=0 keeps the flat loop over the bordered plane and its copy out
  const bool row_pairs = p.dw3 && p.sL == 1 && p.OL >= min_ol && dw3_s1_plane_fn() &&
                         !switched_off("MPSGRAPH_CPU_DW3_ROW_PAIRS");
  // narrow planes: the edge columns would cost as much as the rest (at stride 1 up to 56 wide:
  // MobileNetV2's 144 channels at 56x56 335 -> 272 us; at 112 the copies cost more, 1.07x).
  // Row pairs (no copy out) pay at 112 too: 32 channels at 112x112, 0.91 -> 0.86 ms at batch 8.
  p.dw3_border = p.dw3 && strides[0] == p.sL && dil[0] == 1 && p.pbL >= 0 && p.pbT >= 0 &&
                 (p.OL < 32 || (p.sL == 1 && p.OL < (row_pairs ? 128 : 64)));
  if (p.dw3_border) {
    p.Wb = std::max(p.pbL + p.IL, p.sL * (p.OL - 1) + 3);
    p.Hb = std::max(p.pbT + src[2], p.sL * (p.R - 1) + 3);
  }
  // MPSGRAPH_CPU_DW3_PHASES=0 keeps stride 2's flat loop over the bordered plane (about half
  // its outputs unused, between the rows)
  p.dw3_phase = p.dw3_border && p.sL == 2 && !switched_off("MPSGRAPH_CPU_DW3_PHASES");
  if (p.dw3_phase) {  // B's width (even) and a phase's rows
    p.Wb = 2 * std::max(p.OL + 1, (p.pbL + p.IL + 1) / 2);
    p.Hb = p.R + 1;
  }
  // MPSGRAPH_CPU_DW3_PHASE_PAIRS=0 keeps the flat loop over the phases and its copy out
  p.dw3_phase_pairs =
      p.dw3_phase && p.OL >= min_ol && dw3_s2_plane_fn() && !switched_off("MPSGRAPH_CPU_DW3_PHASE_PAIRS");
  if (p.dw3) p.zeros = std::make_shared<const std::vector<float>>(size_t(p.IL), 0.0f);
  p.dw3_s1_avx2 = !switched_off("MPSGRAPH_CPU_DW3_S1_AVX2");
  p.dw3_avx512 = p.OL >= 8 && !switched_off("MPSGRAPH_CPU_DW3_AVX512");
  p.dw3_row_pairs = p.dw3_border && row_pairs;
  // 16 channels at once on rows of at most 7 outputs (AVX-512): MobileNetV2's 7x7 layers at
  // batch 1 ran 1.3-1.8x faster in the network, its 14x14 -> 7x7 stride-2 layer 1.2x; at 14x14
  // the transposes cost what the sums gain (level; 28x28 -> 14x14: 0.95x). MPSGRAPH_CPU_DW3_BLOCK16=0:
  // a channel at a time.
  p.dw3_block16 = p.dw3_border && p.Og == 1 && p.OL <= 7 && !switched_off("MPSGRAPH_CPU_DW3_BLOCK16");
  // MPSGRAPH_CPU_DW3_PREFETCH=0: the rows read in place are not prefetched
  p.dw3_prefetch = p.dw3 && !p.dw3_border && !switched_off("MPSGRAPH_CPU_DW3_PREFETCH");

  // innermost dim: output j reads source j * s + off, off = tap * dilation - pad_before
  const int64_t dL = dil.back(), pbL = pads[2 * (k - 1)];
  for (int64_t t = 0; t < p.KL; ++t) {
    const int64_t off = t * dL - pbL;
    int64_t lo = off >= 0 ? 0 : (-off + p.sL - 1) / p.sL;
    int64_t hi = p.IL - off <= 0 ? 0 : (p.IL - off + p.sL - 1) / p.sL;
    lo = std::min(lo, p.OL);
    hi = std::max(lo, std::min(hi, p.OL));
    p.lo.push_back(lo);
    p.hi.push_back(hi);
    p.start.push_back(lo * p.sL + off);
  }
  // outer dims: (outer tap, output row) -> source row offset
  p.rowtab.assign(size_t(p.Kouter * p.R), -1);
  for (int64_t kt = 0; kt < p.Kouter; ++kt) {
    for (int64_t r = 0; r < p.R; ++r) {
      int64_t krem = kt, rrem = r, off = 0, stride = p.IL;
      bool ok = true;
      for (size_t i = k - 1; i-- > 0;) {
        const int64_t kk = krem % w[2 + i], o = rrem % dy[2 + i];
        krem /= w[2 + i];
        rrem /= dy[2 + i];
        const int64_t pos = o * strides[i] - pads[2 * i] + kk * dil[i];
        if (pos < 0 || pos >= src[2 + i]) ok = false;
        off += pos * stride;
        stride *= src[2 + i];
      }
      if (ok) p.rowtab[size_t(kt * p.R + r)] = off;
    }
  }

  // Work split. Every product is (Og x CK) by a tile of output positions. When Og*CK is small,
  // tiles are cut so that BLAS stays on the calling thread and (item, tile) units go over the
  // pool (the data gradient's tiles of one item overlap in col2im unless direct, so its units
  // are whole items). Otherwise items run one at a time: the gathers use the pool and BLAS
  // threads the large products.
  const int threads = num_threads();
  const int64_t mk = std::max<int64_t>(p.Og * p.CK, 1);
  p.tiles_parallel = kind != Kind::Data || p.direct;
  p.ours = false;
  // units that are few and do not divide among the threads leave threads idle (7 tiles over 2
  // threads run as 4): more tiles, down to 32 columns, until they do
  auto balance = [&] {
    int64_t nt = p.ntiles;
    while (p.N * nt % threads != 0 && p.N * nt < 4 * threads && (p.P + nt) / (nt + 1) >= 32) ++nt;
    p.tile = (p.P + nt - 1) / nt;
    p.ntiles = (p.P + p.tile - 1) / p.tile;
  };
  // MPSGRAPH_CPU_DIRECT_UNITS=0 keeps direct (1x1) products one image at a time, each split over the pool
  const bool direct_units = p.direct && !switched_off("MPSGRAPH_CPU_DIRECT_UNITS");
  if (threads > 1 && packed && kind == Kind::Forward && mk > 8192 && (!p.direct || direct_units) && !p.depthwise &&
      p.G == 1 && p.P > 0) {
    // Packed weights are not repacked per call: (image, tile) units of the columns the shared
    // path's products use, each unit's gather and product on one thread. The shared path
    // meets twice per tile (the gather, then the product) and splits the gather over the
    // source channels: the stem's 3 went 2 to 1.
    p.tile = std::min(p.P, std::max<int64_t>(256, kColumnBudget / p.CK));
    p.ntiles = (p.P + p.tile - 1) / p.tile;
    balance();
    p.ours = p.units() >= threads && (p.units() % threads == 0 || p.units() >= 4 * threads);
  }
  if (!p.ours && threads > 1 && mk <= 8192 && p.P > 0) {
    // tiles of about kUnitWork multiply-adds (a BLAS call per tile repacks the weights), cut
    // smaller only where there would be fewer than two units per thread
    p.tile = std::min(p.P, std::max<int64_t>(128, kUnitWork / mk));
    p.ntiles = (p.P + p.tile - 1) / p.tile;
    if (p.units() < 2 * threads && p.tiles_parallel && p.items() > 0) {
      const int64_t per_item = (2 * threads + p.items() - 1) / p.items();
      p.tile = std::max<int64_t>(32, (p.P + per_item - 1) / per_item);
      p.ntiles = (p.P + p.tile - 1) / p.tile;
    }
    if (kind == Kind::Forward && p.G == 1) balance();
    // tiles of whole 16-column blocks where that keeps their number: no column tails (masked
    // loads and stores) and rows that start on a cache line (MPSGRAPH_CPU_CONV_TILE16=0: as cut)
    const int64_t t16 = (p.tile + 15) / 16 * 16;
    if (kind == Kind::Forward && t16 < p.P && (p.P + t16 - 1) / t16 == p.ntiles &&
        !switched_off("MPSGRAPH_CPU_CONV_TILE16"))
      p.tile = t16;
    p.ours = p.units() >= 2;
  }
  if (!p.ours) {
    // direct forward: output blocks of about the same size, so the epilogue finds them in cache
    const int64_t rows = p.direct ? (kind == Kind::Forward ? p.Og : 0) : p.CK;
    p.tile = rows ? std::max<int64_t>(1, std::min(p.P, std::max<int64_t>(256, kColumnBudget / rows)))
                  : std::max<int64_t>(p.P, 1);
    p.ntiles = p.P > 0 ? (p.P + p.tile - 1) / p.tile : 0;
    // tiles of equal width (a multiple of 16 columns): no narrow last tile of column tails
    if (p.ntiles > 1) {
      p.tile = std::min(p.P, ((p.P + p.ntiles - 1) / p.ntiles + 15) / 16 * 16);
      p.ntiles = (p.P + p.tile - 1) / p.tile;
    }
  }
  p.slots = p.ours ? int(std::min<int64_t>(threads, p.units())) : 1;
  // Outputs larger than L3 go to memory whatever the stores, and the next layer reads them from
  // there: stored past the caches they cost no reads for ownership (MobileNetV2's 8x96x112x112,
  // 38.5 MB: 1.05-1.07x, the depthwise layer after it 1.04-1.09x, in two runs of three; level in
  // the third). Smaller ones stay cached for the next layer (14.5 MB streamed: the layers that
  // read them 0.69-0.93x). MPSGRAPH_CPU_PACKED_STREAM=0 keeps every output in the caches.
  p.stream_out = kind == Kind::Forward && packed && p.N * p.O * p.P * int64_t(sizeof(float)) > stream_bytes() &&
                 !switched_off("MPSGRAPH_CPU_PACKED_STREAM");
  // MPSGRAPH_CPU_UNIT_SHARES=0: the units claimed in turn from one counter
  p.own_shares = p.ours && !switched_off("MPSGRAPH_CPU_UNIT_SHARES");
  p.col_elems = p.direct || p.depthwise ? 0 : p.CK * p.tile;
  // Few output positions per image (deep layers): one GEMM per image would stream the weights
  // once per image in thin products; images side by side make one wider product.
  if (kind == Kind::Forward && !p.ours && !p.direct && !p.depthwise && p.G == 1 && p.N > 1 && p.P < kWidePositions) {
    p.images = std::min(p.N, std::max<int64_t>(1, kWidePositions / p.P));
    p.col_elems = p.CK * p.images * p.P;
  }
  return p;
}

// Gathers column rows (c, tap) for channels [c0, c1) and output positions [p0, p1) of one item.
// Rows are `ld` apart (0: p1 - p0).
template <class T>
void im2col(const Plan& p, const T* x, T* col, int64_t p0, int64_t p1, int64_t c0, int64_t c1, int64_t ld = 0) {
  const int64_t pt = ld ? ld : p1 - p0, rb = p0 / p.OL, re = (p1 - 1) / p.OL;
  for (int64_t c = c0; c < c1; ++c) {
    const T* xc = x + c * p.in_plane;
    for (int64_t kt = 0; kt < p.Kouter; ++kt) {
      for (int64_t t = 0; t < p.KL; ++t) {
        T* dst = col + (c * p.Ksz + kt * p.KL + t) * pt;
        const int64_t lo = p.lo[size_t(t)], hi = p.hi[size_t(t)], st = p.start[size_t(t)];
        for (int64_t r = rb; r <= re; ++r) {
          const int64_t j0 = r == rb ? p0 - r * p.OL : 0, j1 = r == re ? p1 - r * p.OL : p.OL;
          T* d = dst + (r * p.OL + j0 - p0);  // position j0 of row r
          const int64_t base = p.rowtab[size_t(kt * p.R + r)];
          const int64_t a = std::min(std::max(lo, j0), j1), b = std::max(a, std::min(hi, j1));
          if (base < 0 || a == b) {
            std::fill(d, d + (j1 - j0), T(0));
            continue;
          }
          std::fill(d, d + (a - j0), T(0));
          const T* s = xc + base + st + (a - lo) * p.sL;
          T* da = d + (a - j0);
          if (p.sL == 1) std::memcpy(da, s, size_t(b - a) * sizeof(T));
          else if (std::is_same_v<T, float> && p.sL == 2)  // (never taken for other T)
            p.stride2(reinterpret_cast<const float*>(s), reinterpret_cast<float*>(da), b - a);
          else
            for (int64_t j = 0; j < b - a; ++j) da[j] = s[j * p.sL];
          std::fill(d + (b - j0), d + (j1 - j0), T(0));
        }
      }
    }
  }
}

// Adds column rows back into the source planes (the adjoint of im2col).
template <class T>
void col2im(const Plan& p, const T* col, T* x, int64_t p0, int64_t p1, int64_t c0, int64_t c1) {
  const int64_t pt = p1 - p0, rb = p0 / p.OL, re = (p1 - 1) / p.OL;
  for (int64_t c = c0; c < c1; ++c) {
    T* xc = x + c * p.in_plane;
    for (int64_t kt = 0; kt < p.Kouter; ++kt) {
      for (int64_t t = 0; t < p.KL; ++t) {
        const T* src = col + (c * p.Ksz + kt * p.KL + t) * pt;
        const int64_t lo = p.lo[size_t(t)], hi = p.hi[size_t(t)], st = p.start[size_t(t)];
        for (int64_t r = rb; r <= re; ++r) {
          const int64_t base = p.rowtab[size_t(kt * p.R + r)];
          if (base < 0) continue;
          const int64_t j0 = r == rb ? p0 - r * p.OL : 0, j1 = r == re ? p1 - r * p.OL : p.OL;
          const int64_t a = std::min(std::max(lo, j0), j1), b = std::max(a, std::min(hi, j1));
          const T* sa = src + (r * p.OL + a - p0);
          T* d = xc + base + st + (a - lo) * p.sL;
          if (p.sL == 1)
            for (int64_t j = 0; j < b - a; ++j) d[j] += sa[j];
          else
            for (int64_t j = 0; j < b - a; ++j) d[j * p.sL] += sa[j];
        }
      }
    }
  }
}

// Runs f(c0, c1) over the item's channels: over the pool unless units already are.
template <class F>
void over_channels(const Plan& p, int64_t pt, F&& f) {
  if (p.ours) f(int64_t(0), p.Cg);
  else
    parallel_for(p.Cg, std::max<int64_t>(1, 16384 / std::max<int64_t>(p.Ksz * pt, 1)),
                 [&](int64_t c0, int64_t c1) { f(c0, c1); });
}

// The epilogue's leading ops in a form folded into the depthwise rows and the packed GEMM's
// store: a bias add (per channel or scalar), then one clamp (relu, relu6, maximum and/or minimum
// with a scalar). `folded` ops are covered; `fused` false: some are applied after.
struct RowEpilogue {
  bool fused = false;
  size_t folded = 0;
  int bias = -1, lo = -1, hi = -1;  // operand inputs, -1: none
  bool bias_channel = false, relu = false;
  int res = -1;  // the op after those an add of a whole tensor (a residual): its operand, else -1;
                 // only the packed store folds it (not counted in `folded`)
  bool minmax = false;  // the packed store clamps with max and min (PackedStore::minmax)
};

RowEpilogue row_epilogue(const ConvEpilogue& e) {
  using K = EpilogueOp::Kind;
  using A = EpilogueOp::Arg;
  RowEpilogue r;
  size_t i = 0;
  const auto& ops = e.ops;
  if (i < ops.size() && ops[i].kind == K::Add && (ops[i].arg == A::Channel || ops[i].arg == A::Scalar)) {
    r.bias = ops[i].input;
    r.bias_channel = ops[i].arg == A::Channel;
    ++i;
  }
  if (i < ops.size() && ops[i].kind == K::Relu) r.relu = true, ++i;
  else if (i < ops.size() && ops[i].kind == K::Clamp) r.lo = ops[i].input, r.hi = ops[i].input + 1, ++i;
  else {
    // the operand second: the rows' comparisons (x <= lo, x >= hi) are the kernels' for that order
    auto scalar = [&](K k) { return i < ops.size() && ops[i].kind == k && ops[i].arg == A::Scalar && !ops[i].other_first; };
    if (scalar(K::Max)) r.lo = ops[i].input, ++i;
    if (scalar(K::Min)) r.hi = ops[i].input, ++i;
  }
  r.folded = i;
  r.fused = i == ops.size();
  // MPSGRAPH_CPU_PACKED_MINMAX=0 (read at compile) keeps the packed store's clamp as compares and blends
  r.minmax = !switched_off("MPSGRAPH_CPU_PACKED_MINMAX");
  // MPSGRAPH_CPU_PACKED_RESIDUAL=0 (read at compile) leaves the residual add to its own pass
  if (i < ops.size() && ops[i].kind == K::Add && ops[i].arg == A::Full && !switched_off("MPSGRAPH_CPU_PACKED_RESIDUAL"))
    r.res = ops[i].input;
  return r;
}

// The clamp bounds of `re` from this run's operands (lo, hi; NaN: the clamp kernel's rules, so
// the caller leaves the clamp unfolded).
std::pair<float, float> row_bounds(const RowEpilogue& re, const float* const* in) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  return {re.relu ? 0.0f : re.lo >= 0 ? in[re.lo][0] : -inf, re.hi >= 0 ? in[re.hi][0] : inf};
}

// An epilogue and its operands for one run (none: e is null); ops before `from` are done.
// `row`: the epilogue's foldable head, worked out once at compile.
struct Epi {
  const ConvEpilogue* e = nullptr;
  const float* const* in = nullptr;
  const RowEpilogue* row = nullptr;
  size_t from = 0;
  template <class T>
  void operator()(T* y, int64_t n, int64_t o0, int64_t o1, int64_t p0, int64_t p1) const {
    if constexpr (std::is_same_v<T, float>)
      if (e) e->apply(y, in, n, o0, o1, p0, p1, from);
  }
  // The leading bias and clamp as the packed GEMM's store (channels from o0), and a residual
  // add after them where `at` (the product's first element's flat index in the output) is given:
  // the output's layout; returns the epilogue left to apply after it. NaN clamp bounds stay
  // unfolded (the clamp kernel's rules).
  Epi fold(PackedStore& st, int64_t o0, int64_t at = -1, int64_t ld = 0) const {
    if (!e || !row || (row->folded == 0 && (row->res < 0 || at < 0))) return *this;
    const RowEpilogue& re = *row;
    const std::pair<float, float> bounds = row_bounds(re, in);
    const float lo = bounds.first, hi = bounds.second;
    if (std::isnan(lo) || std::isnan(hi)) return *this;
    if (re.bias >= 0) {
      st.bias = in[re.bias] + (re.bias_channel ? o0 : 0);
      st.bias_stride = re.bias_channel ? 1 : 0;
    }
    st.clamp = re.relu || re.lo >= 0 || re.hi >= 0;
    st.lo = lo;
    st.hi = hi;
    auto minus_zero = [](float v) { return v == 0.0f && std::signbit(v); };
    st.minmax = re.minmax && !minus_zero(lo) && !minus_zero(hi);
    Epi rest = *this;
    rest.from = re.folded;
    if (re.res >= 0 && at >= 0) {  // the residual read where the block is stored, not in another pass
      st.res = in[re.res] + at;
      st.ldr = ld;
      rest.from += 1;
    }
    return rest;
  }
};

template <class T>
struct Scratch {  // in the program's memory plan (KernelCtx::scratch)
  T* pool = nullptr;  // pool_tiles: slots * Og * tile, each slot's block of output rows
  T* col = nullptr;  // slots * col_elems
  T* acc = nullptr;  // nacc * out_elems: weights gradient partial sums of slots 1..
  int64_t nacc = 0;
  T* wide = nullptr;  // images > 1: the product, O x (images * P)
};

// Forward with images side by side: per group of images, their columns, one GEMM, the rows
// copied out to each image, then its epilogue.
template <class T>
void run_images(const Plan& p, const T* x, const T* w, T* y, Scratch<T>& s, const Epi& epi) {
  for (int64_t n0 = 0; n0 < p.N; n0 += p.images) {
    const int64_t nb = std::min(p.images, p.N - n0), ld = nb * p.P;
    over_channels(p, p.P, [&](int64_t c0, int64_t c1) {
      for (int64_t i = 0; i < nb; ++i) im2col(p, x + (n0 + i) * p.C * p.in_plane, s.col + i * p.P, 0, p.P, c0, c1, ld);
    });
    Epi rest = epi;
    if constexpr (std::is_same_v<T, float>)
      if (p.packed) {
        PackedStore st;
        rest = epi.fold(st, 0);
        st.gathered = true;
        packed_gemm(*p.packed, s.col, ld, ld, s.wide, ld, &st);
      }
    if (!p.packed) gemm(false, false, p.O, ld, p.CK, w, p.CK, s.col, ld, T(0), s.wide, ld);
    parallel_for(nb * p.O, std::max<int64_t>(1, 16384 / p.P), [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        const int64_t i = k / p.O, o = k % p.O;
        std::memcpy(y + ((n0 + i) * p.O + o) * p.P, s.wide + o * ld + i * p.P, size_t(p.P) * sizeof(T));
      }
    });
    for (int64_t i = 0; i < nb; ++i) rest(y, n0 + i, 0, p.O, 0, p.P);
  }
}

// One tile [p0, p1) of one item. in0/in1/out: forward (x, w) -> y; data (dy, w) -> dx;
// weights (dy, x) -> dw (accumulated).
template <class T>
void run_tile(const Plan& p, int64_t item, int64_t p0, int64_t p1, const T* in0, const T* in1, T* out, T* col,
              const Epi& epi, T* block = nullptr) {
  const int64_t n = item / p.G, g = item % p.G, pt = p1 - p0;
  const int64_t x_off = (n * p.C + g * p.Cg) * p.in_plane, y_off = (n * p.O + g * p.Og) * p.P, w_off = g * p.Og * p.CK;
  switch (p.kind) {
    case Kind::Forward: {
      const T *x = in0 + x_off, *w = in1 + w_off;
      T* y = out + y_off + p0;
      if (!p.direct) over_channels(p, pt, [&](int64_t c0, int64_t c1) { im2col(p, x, col, p0, p1, c0, c1); });
      const T* b = p.direct ? x + p0 : col;  // (CK, pt), rows ldb apart
      const int64_t ldb = p.direct ? p.in_plane : pt;
      if constexpr (std::is_same_v<T, float>) {
        if (p.pool_tiles) {  // rows [p0, p1) to the slot's block, pooled from there into out
          PackedStore st;
          const Epi rest = epi.fold(st, 0);
          st.gathered = !p.direct;
          packed_gemm(*p.packed, b, ldb, pt, block, pt, &st);
          rest.e->apply_block(block, pt, rest.in, 0, p.O, pt, rest.from);
          return rest.e->pool_block(block, pt, out, n, 0, p.O, p0 / (2 * p.OL), p1 / (2 * p.OL));
        }
        if (p.packed) {  // the bias and clamp in the store, while the block is in registers
          PackedStore st;
          const Epi rest = epi.fold(st, g * p.Og, y_off + p0, p.P);
          st.stream = p.stream_out && (!rest.e || rest.from >= rest.e->ops.size());  // nothing read back after
          st.gathered = !p.direct;
          packed_gemm(*p.packed, b, ldb, pt, y, p.P, &st);
          return rest(out, n, g * p.Og, (g + 1) * p.Og, p0, p1);
        }
      }
      gemm(false, false, p.Og, pt, p.CK, w, p.CK, b, ldb, T(0), y, p.P);
      return epi(out, n, g * p.Og, (g + 1) * p.Og, p0, p1);
    }
    case Kind::Data: {
      const T *dy = in0 + y_off + p0, *w = in1 + w_off;
      T* dx = out + x_off;
      if (p.direct) return gemm(true, false, p.Cg, pt, p.Og, w, p.CK, dy, p.P, T(0), dx + p0, p.in_plane);
      gemm(true, false, p.CK, pt, p.Og, w, p.CK, dy, p.P, T(0), col, pt);
      return over_channels(p, pt, [&](int64_t c0, int64_t c1) { col2im(p, col, dx, p0, p1, c0, c1); });
    }
    case Kind::Weights: {
      const T *dy = in0 + y_off + p0, *x = in1 + x_off;
      T* dw = out + w_off;
      if (p.direct) return gemm(false, true, p.Og, p.Cg, pt, dy, p.P, x + p0, p.in_plane, T(1), dw, p.CK);
      over_channels(p, pt, [&](int64_t c0, int64_t c1) { im2col(p, x, col, p0, p1, c0, c1); });
      return gemm(false, true, p.Og, p.CK, pt, dy, p.P, col, pt, T(1), dw, p.CK);
    }
  }
}

// One source row's three innermost taps added into output row yr (depthwise, KL == 3): b[off[t]
// + j * sL] is tap t's source for output j. Where all three are in range ([jlo, jhi)) the loop
// has no branches and vectorises; the edges check each tap. Taps add in order, as the generic loop.
template <class T, int SL>
void depthwise_taps3(const Plan& p, T* yr, const T* b, const int64_t* off, const T* wk, int64_t jlo, int64_t jhi) {
  const int64_t sl = SL > 0 ? SL : p.sL;
  const T w0 = wk[0], w1 = wk[1], w2 = wk[2];
  const T *b0 = b + off[0], *b1 = b + off[1], *b2 = b + off[2];
  for (int64_t j = jlo; j < jhi; ++j) {
    T v = yr[j];
    v += w0 * b0[j * sl];
    v += w1 * b1[j * sl];
    v += w2 * b2[j * sl];
    yr[j] = v;
  }
  auto edge = [&](int64_t j) {
    T v = yr[j];
    for (int t = 0; t < 3; ++t)
      if (j >= p.lo[size_t(t)] && j < p.hi[size_t(t)]) v += wk[t] * b[off[t] + j * sl];
    yr[j] = v;
  };
  for (int64_t j = 0; j < std::min(jlo, p.OL); ++j) edge(j);
  for (int64_t j = std::max(jhi, jlo); j < p.OL; ++j) edge(j);
}

// d[0, n) = s[0, n) for the bordered planes' rows: below 16 floats inline 4-wide moves, the
// last one overlapping, instead of a memcpy call per row (MobileNetV2's 960 channels at 7x7 96
// -> 82 us at 1 thread; at 56 wide memcpy's was faster, 292 against 330 us).
inline void copy_row(float* d, const float* s, int64_t n) {
#if MG_CPU_X86
  if (n >= 4 && n < 16) {
    for (int64_t k = 0; k + 4 <= n; k += 4) _mm_storeu_ps(d + k, _mm_loadu_ps(s + k));
    _mm_storeu_ps(d + n - 4, _mm_loadu_ps(s + n - 4));
    return;
  }
#endif
  std::memcpy(d, s, size_t(n) * sizeof(float));
}

// `rows` rows of n floats, dld and sld apart: a plane's rows in one call.
using CopyRowsFn = void (*)(float* d, int64_t dld, const float* s, int64_t sld, int64_t rows, int64_t n);
void copy_rows_generic(float* d, int64_t dld, const float* s, int64_t sld, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) copy_row(d + r * dld, s + r * sld, n);
}
#if MG_CPU_X86
// 8-wide moves, the last one overlapping (rows of 8 to 64 floats: a memcpy call per row cost
// more than the copy)
MG_TARGET_AVX2 void copy_rows_avx2(float* d, int64_t dld, const float* s, int64_t sld, int64_t rows, int64_t n) {
  if (n < 8 || n > 64) return copy_rows_generic(d, dld, s, sld, rows, n);
  for (int64_t r = 0; r < rows; ++r, d += dld, s += sld) {
    for (int64_t k = 0; k + 8 <= n; k += 8) _mm256_storeu_ps(d + k, _mm256_loadu_ps(s + k));
    _mm256_storeu_ps(d + n - 8, _mm256_loadu_ps(s + n - 8));
  }
}
#endif
CopyRowsFn copy_rows_fn() {
#if MG_CPU_X86
  // MPSGRAPH_CPU_DW3_COPY_ROWS=0 keeps a copy call per row
  if (best_isa() != Isa::Generic && !switched_off("MPSGRAPH_CPU_DW3_COPY_ROWS")) return copy_rows_avx2;
#endif
  return copy_rows_generic;
}

// Depthwise 3x3 (float32, innermost stride 1 or 2): each output row in one pass over its three
// source rows (conv_depthwise.h) with the bias and clamp of the epilogue, edges scalar.
void depthwise3x3(const Plan& p, const float* x, const float* w, float* y, const Epi& epi) {
  const Dw3RowFn row = dw3_row_fn(p.sL, p.dw3_s1_avx2, p.dw3_avx512);
  const CopyRowsFn copy_rows = copy_rows_fn();
  const Dw3PlaneFn plane_s1 = p.dw3_row_pairs ? dw3_s1_plane_fn(p.dw3_avx512) : nullptr;
  const Dw3PhasePlaneFn plane_s2 = p.dw3_phase_pairs ? dw3_s2_plane_fn(p.dw3_avx512) : nullptr;
  const Dw3Block16Fn block16 = p.dw3_block16 ? dw3_block16_fn() : nullptr;
  const Dw3Block blk{p.IL ? p.in_plane / p.IL : 0, p.IL, p.R, p.OL, p.sL, p.pbT, p.pbL};
  RowEpilogue re = epi.e && epi.row ? *epi.row : RowEpilogue{true};
  constexpr float inf = std::numeric_limits<float>::infinity();
  const std::pair<float, float> bounds = row_bounds(re, epi.in);
  float lo = bounds.first, hi = bounds.second;
  if (std::isnan(lo) || std::isnan(hi)) re.fused = false;  // the clamp kernel's NaN rules: unfused
  if (!re.fused) lo = -inf, hi = inf;
  const int64_t per_image = p.G * p.Og, grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(p.P * 9, 1));
  int64_t jlo = 0, jhi = p.OL;  // outputs whose three taps are all inside the source row
  for (size_t t = 0; t < 3; ++t) {
    jlo = std::max(jlo, p.lo[t]);
    jhi = std::min(jhi, p.hi[t]);
  }
  const float* zero = p.zeros->data() - p.pbL;
  // dw3_flat: output (r, j) reads source (r + kt - pad, j + t - pad) at flat offset r * OL + j +
  // const, so the rows [rlo, rhi) whose three source rows exist run as one long loop from (rlo,
  // jlo) to (rhi - 1, jhi); its edge columns (which read the neighbouring rows) are redone after.
  int64_t rlo = 0, rhi = 0;
  if (p.dw3_flat && jlo < jhi) {
    while (rlo < p.R && (p.rowtab[size_t(rlo)] < 0 || p.rowtab[size_t(2 * p.R + rlo)] < 0)) ++rlo;
    rhi = rlo;
    while (rhi < p.R && p.rowtab[size_t(rhi)] >= 0 && p.rowtab[size_t(2 * p.R + rhi)] >= 0) ++rhi;
  }
  // dw3_border: the plane is copied into a zero-bordered one of width Wb; output (r, j) then
  // reads it at s * (r * Wb + j) + kt * Wb + t, so one flat loop makes every output (at row
  // stride Wb, with Wb - OL unused ones between rows), copied out after.
  // dw3_phase: the bordered plane B (width Wb, even) as its even rows, then its odd ones: a
  // pair of output rows of stride-2 taps is then Wb / 2 outputs apart (not Wb as in B, half of
  // them unused), so one flat stride-2 loop makes them, in whole vectors: tap (kt, t) of output
  // (r, j) reads phase kt & 1 at (r + kt / 2) * Wb + 2 * j + t = 2 * (r * Wb / 2 + j) + ...
  const int64_t Wb = p.Wb, Hb = p.Hb, IH = p.IL ? p.in_plane / p.IL : 0, Wh = Wb / 2;
  const int64_t nq = (p.R * Wh + 7) / 8 * 8, phase = 2 * nq + Wb + 18;  // phase: reads stay inside
  // unit u's source plane (unit: an image's output channel)
  auto source_plane = [&](int64_t u) { return x + (u / per_image * p.C + u % per_image / p.Og) * p.in_plane; };
  parallel_for(p.N * per_image, grain, [&](int64_t u0, int64_t u1) {
    thread_local std::vector<float> plane;  // bordered source, then the output rows at width Wb
    if (p.dw3_phase) plane.resize(size_t(2 * phase + nq + 1));
    else if (p.dw3_border) plane.resize(size_t((Hb + p.R) * Wb));
    // the padding once per task: every channel then writes the same places
    if (p.dw3_phase) std::fill(plane.begin(), plane.begin() + 2 * phase, 0.0f);
    else if (p.dw3_border) std::fill(plane.begin(), plane.begin() + Hb * Wb, 0.0f);
    thread_local std::vector<float> block;  // block16's transposed planes
    if (block16) block.resize(size_t(dw3_block16_scratch(blk)));
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t n = u / per_image, oc = u % per_image;
      const float* xc = source_plane(u) - p.pbL;
      const float* wc = w + oc * 9;
      float* yc = y + (n * p.O + oc) * p.P;
      const bool biased = re.fused && re.bias >= 0;
      const float bias = biased ? epi.in[re.bias][re.bias_channel ? oc : 0] : 0.0f;
      if (block16 && u + 16 <= u1 && oc + 16 <= per_image) {  // 16 channels (one per group: dw3_block16)
        const float* b = biased ? epi.in[re.bias] + (re.bias_channel ? oc : 0) : &bias;
        block16(blk, xc + p.pbL, p.in_plane, wc, b, biased && re.bias_channel ? 1 : 0, lo, hi, yc, p.P, block.data());
        if (!re.fused) epi(y, n, oc, oc + 16, 0, p.P);
        u += 15;
        continue;
      }
      if (p.dw3_phase) {
        float *f = plane.data(), *yb = f + 2 * phase;
        for (int64_t q = 0; q < 2; ++q) {  // the source rows of bordered row parity q
          const int64_t i0 = (q - p.pbT) & 1, b0 = (i0 + p.pbT) >> 1;  // (pbT >= 0)
          const int64_t rows = std::min((IH - i0 + 1) / 2, Hb - b0);
          if (rows > 0) copy_rows(f + q * phase + b0 * Wb + p.pbL, Wb, xc + p.pbL + i0 * p.IL, 2 * p.IL, rows, p.IL);
        }
        if (plane_s2) {
          plane_s2(f, f + phase, Wb, wc, yc, p.OL, p.R, bias, lo, hi);
          if (!re.fused) epi(y, n, oc, oc + 1, 0, p.P);
          continue;
        }
        const float* rows[3] = {f, f + phase, f + Wb};
        row(rows, wc, yb, 0, nq + 1, bias, lo, hi);  // nq in vectors (the loop reads one ahead)
        copy_rows(yc, p.OL, yb, Wh, p.R, p.OL);
        if (!re.fused) epi(y, n, oc, oc + 1, 0, p.P);
        continue;
      }
      if (p.dw3_border) {
        float *xb = plane.data(), *yb = xb + Hb * Wb;
        copy_rows(xb + p.pbT * Wb + p.pbL, Wb, xc + p.pbL, p.IL, IH, p.IL);
        if (plane_s1) {
          plane_s1(xb, Wb, wc, yc, p.OL, p.R, bias, lo, hi);
          if (!re.fused) epi(y, n, oc, oc + 1, 0, p.P);
          continue;
        }
        const float* rows[3] = {xb, xb + Wb, xb + 2 * Wb};
        row(rows, wc, yb, 0, (p.R - 1) * Wb + p.OL, bias, lo, hi);
        copy_rows(yc, p.OL, yb, Wb, p.R, p.OL);
        if (!re.fused) epi(y, n, oc, oc + 1, 0, p.P);
        continue;
      }
      // the next channel's source plane, fetched into L2 a slice per output row: these rows
      // read three source rows each, stride 2 two rows on, which the hardware prefetchers do
      // not follow from memory (MobileNetV2's 112x112 -> 56x56 layer at batch 8, its 38.5 MB
      // source in memory: 4.0-4.6 ms without, against 2.0 ms for the plain loop)
#if MG_CPU_X86
      const char* ahead = nullptr;
      int64_t ahead_lines = 0;
      if (p.dw3_prefetch && u + 1 < u1) {
        ahead = reinterpret_cast<const char*>(source_plane(u + 1));
        ahead_lines = (p.in_plane * int64_t(sizeof(float)) + 63) / 64;
      }
#endif
      if (rhi > rlo) {
        const float* flat[3];
        for (int64_t kt = 0; kt < 3; ++kt) flat[kt] = xc + p.rowtab[size_t(kt * p.R + rlo)] - rlo * p.OL;
        row(flat, wc, yc, rlo * p.OL + jlo, (rhi - 1) * p.OL + jhi, bias, lo, hi);
      }
      for (int64_t r = 0; r < p.R; ++r) {
        const float* rows[3];
        float w9[9];
        for (int64_t kt = 0; kt < 3; ++kt) {  // a row in the padding: zeros times zero weights
          const int64_t base = p.rowtab[size_t(kt * p.R + r)];
          rows[kt] = base < 0 ? zero : xc + base;
          for (int64_t t = 0; t < 3; ++t) w9[kt * 3 + t] = base < 0 ? 0.0f : wc[kt * 3 + t];
        }
        float* yr = yc + r * p.OL;
#if MG_CPU_X86
        for (int64_t l = r * ahead_lines / p.R, le = (r + 1) * ahead_lines / p.R; ahead && l < le; ++l)
          _mm_prefetch(ahead + l * 64, _MM_HINT_T1);
#endif
        if (r < rlo || r >= rhi) row(rows, w9, yr, jlo, jhi, bias, lo, hi);
        auto edge = [&](int64_t j) {
          float v = 0.0f;
          for (int64_t kt = 0; kt < 3; ++kt)
            for (int64_t t = 0; t < 3; ++t)
              if (j >= p.lo[size_t(t)] && j < p.hi[size_t(t)]) v += w9[kt * 3 + t] * rows[kt][j * p.sL + t];
          v += bias;
          v = v <= lo ? lo : v;
          yr[j] = v >= hi ? hi : v;
        };
        for (int64_t j = 0; j < std::min(jlo, p.OL); ++j) edge(j);
        for (int64_t j = std::max(jhi, jlo); j < p.OL; ++j) edge(j);
      }
      if (!re.fused) epi(y, n, oc, oc + 1, 0, p.P);
    }
  });
}

// Depthwise forward (one source channel per group): each output row is a sum of shifted
// source rows times a scalar tap, accumulated in place, so no columns and no M=1 GEMMs.
template <class T>
void depthwise(const Plan& p, const T* x, const T* w, T* y, const Epi& epi) {
  if constexpr (std::is_same_v<T, float>)
    if (p.dw3) return depthwise3x3(p, x, w, y, epi);
  const int64_t per_image = p.G * p.Og;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(p.P * p.Ksz, 1));
  int64_t off[3] = {0, 0, 0}, jlo = 0, jhi = p.OL;  // KL == 3: per tap, source of output j is off + j * sL
  if (p.KL == 3)
    for (size_t t = 0; t < 3; ++t) {
      off[t] = p.start[t] - p.lo[t] * p.sL;
      jlo = std::max(jlo, p.lo[t]);
      jhi = std::min(jhi, p.hi[t]);
    }
  parallel_for(p.N * per_image, grain, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t n = u / per_image, oc = u % per_image, g = oc / p.Og;
      const T* xc = x + (n * p.C + g) * p.in_plane;
      const T* wc = w + oc * p.Ksz;
      T* yc = y + (n * p.O + oc) * p.P;
      for (int64_t r = 0; r < p.R; ++r) {
        T* yr = yc + r * p.OL;
        std::fill(yr, yr + p.OL, T(0));
        for (int64_t kt = 0; kt < p.Kouter; ++kt) {
          const int64_t base = p.rowtab[size_t(kt * p.R + r)];
          if (base < 0) continue;
          if (p.KL == 3) {
            const T* wk = wc + kt * 3;
            if (p.sL == 1) depthwise_taps3<T, 1>(p, yr, xc + base, off, wk, jlo, jhi);
            else if (p.sL == 2) depthwise_taps3<T, 2>(p, yr, xc + base, off, wk, jlo, jhi);
            else depthwise_taps3<T, 0>(p, yr, xc + base, off, wk, jlo, jhi);
            continue;
          }
          for (int64_t t = 0; t < p.KL; ++t) {
            const T wv = wc[kt * p.KL + t];
            const int64_t lo = p.lo[size_t(t)], hi = p.hi[size_t(t)];
            const T* s = xc + base + p.start[size_t(t)] - lo * p.sL;  // s[j * sL] feeds output j
            if (p.sL == 1)
              for (int64_t j = lo; j < hi; ++j) yr[j] += wv * s[j];
            else
              for (int64_t j = lo; j < hi; ++j) yr[j] += wv * s[j * p.sL];
          }
        }
      }
      epi(y, n, oc, oc + 1, 0, p.P);
    }
  });
}

// Depth parts: part t sums the depth [k_t, k_t+1) over every output into its own buffer (part
// 0 into the output), split as parallel_for splits the source's channels, so each thread reads
// the planes its own core wrote (a depthwise layer's channels). Then the threads add the parts
// in order over their rows of the output and apply the epilogue there.
void depth_parts_product(const Plan& p, const float* in0, float* out, int64_t out_elems, const Scratch<float>& s,
                         const Epi& epi) {
  const int64_t parts = p.depth_parts, per = (p.CK + parts - 1) / parts;
  parallel_for(parts, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t k0 = std::min(p.CK, t * per), k1 = std::min(p.CK, k0 + per);
      float* part = t == 0 ? out : s.acc + (t - 1) * out_elems;  // every part has depth (planning)
      if (p.part_weights.empty()) packed_gemm_depth(*p.packed, in0, p.in_plane, p.P, part, p.P, k0, k1);
      else packed_gemm_rows(*p.part_weights[size_t(t)], in0 + k0 * p.in_plane, p.in_plane, p.P, part, p.P, 0, p.O);
    }
  });
  parallel_for(p.O, 1, [&](int64_t r0, int64_t r1) {
    float* o = out + r0 * p.P;
    const int64_t n = (r1 - r0) * p.P;
    for (int64_t t = 1; t < parts; ++t) {
      const float* part = s.acc + (t - 1) * out_elems + r0 * p.P;
      for (int64_t i = 0; i < n; ++i) o[i] += part[i];
    }
    epi(out, 0, r0, r1, 0, p.P);
  });
}

template <class T>
void execute(const Plan& p, const T* in0, const T* in1, T* out, int64_t out_elems, Scratch<T>& s, const Epi& epi = {}) {
  if (out_elems == 0) return;
  const bool empty_work = p.items() == 0 || p.P == 0 || p.CK == 0 || p.Og == 0;
  if (empty_work || p.kind == Kind::Weights) std::fill(out, out + out_elems, T(0));  // weights: accumulated
  if (empty_work) {
    for (int64_t n = 0; n < p.N; ++n) epi(out, n, 0, p.O, 0, p.P);
    return;
  }
  if (p.depthwise) return depthwise(p, in0, in1, out, epi);
  if (p.images > 1) return run_images(p, in0, in1, out, s, epi);
  if constexpr (std::is_same_v<T, float>) {
    if (p.depth_parts > 1) return depth_parts_product(p, in0, out, out_elems, s, epi);
    if (p.split_channels) {
      const int64_t mr = packed_panel_rows(*p.packed);
      parallel_for((p.O + mr - 1) / mr, 1, [&](int64_t q0, int64_t q1) {
        const int64_t r0 = q0 * mr, r1 = std::min(p.O, q1 * mr);
        PackedStore st;
        const Epi rest = epi.fold(st, 0, 0, p.P);
        packed_gemm_rows(*p.packed, in0, p.in_plane, p.P, out, p.P, r0, r1, &st);
        rest(out, 0, r0, r1, 0, p.P);
      });
      return;
    }
  }
  auto run_unit = [&](int64_t u, int slot) {
    T* col = s.col + slot * p.col_elems;
    T* o = p.kind == Kind::Weights && slot > 0 ? s.acc + (slot - 1) * out_elems : out;
    const int64_t item = p.tiles_parallel ? u / p.ntiles : u;
    const int64_t t0 = p.tiles_parallel ? u % p.ntiles : 0, t1 = p.tiles_parallel ? t0 + 1 : p.ntiles;
    if (p.kind == Kind::Data && !p.direct) {  // col2im accumulates: clear the item's planes first
      T* dx = out + (item / p.G * p.C + item % p.G * p.Cg) * p.in_plane;
      std::fill(dx, dx + p.Cg * p.in_plane, T(0));
    }
    T* block = p.pool_tiles ? s.pool + slot * p.Og * p.tile : nullptr;
    for (int64_t t = t0; t < t1; ++t)
      run_tile(p, item, t * p.tile, std::min(p.P, (t + 1) * p.tile), in0, in1, o, col, epi, block);
  };
  if (!p.ours) {
    for (int64_t u = 0; u < p.units(); ++u) run_unit(u, 0);
    return;
  }
  if (p.kind == Kind::Weights)
    std::fill(s.acc, s.acc + s.nacc * out_elems, T(0));
  // units are claimed (a thread slowed by another process takes fewer), except the weights
  // gradient's: its per-slot partial sums would then add up in a different order per run
  UnitShares shares(p.units(), p.slots, p.own_shares);
  const bool claim = p.kind != Kind::Weights;
  parallel_for(p.slots, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t sl = s0; sl < s1; ++sl) {
      if (claim)
        shares.run(sl, [&](int64_t u) { run_unit(u, int(sl)); });
      else
        for (int64_t u = sl; u < p.units(); u += p.slots) run_unit(u, int(sl));
    }
  });
  if (p.kind == Kind::Weights && s.nacc > 0) {
    parallel_for(out_elems, 65536, [&](int64_t b, int64_t e) {
      for (int64_t a = 0; a < s.nacc; ++a)
        for (int64_t i = b; i < e; ++i) out[i] += s.acc[a * out_elems + i];
    });
  }
}

// Scratch requests: (col index, acc index, number of partial sums) into the kernel's `out`.
struct ScratchPlan {
  size_t col, acc;
  int64_t nacc;
  size_t wide, pool;
};
template <class T>
ScratchPlan plan_scratch(const KernelCtx& c, const Plan& p, int64_t out_elems) {
  const int64_t nacc = p.kind == Kind::Weights && p.ours ? p.slots - 1 : std::max(p.depth_parts - 1, 0);
  const size_t col = c.scratch(size_t(p.slots * p.col_elems) * sizeof(T));
  const size_t acc = c.scratch(size_t(nacc * out_elems) * sizeof(T));
  const size_t wide = c.scratch(size_t(p.images > 1 ? p.O * p.images * p.P : 0) * sizeof(T));
  const size_t pool = c.scratch(size_t(p.pool_tiles ? p.slots * p.Og * p.tile : 0) * sizeof(T));
  return {col, acc, nacc, wide, pool};
}
template <class T>
Scratch<T> scratch_of(const ScratchPlan& sp, void* const* out) {
  return {static_cast<T*>(out[sp.pool]), static_cast<T*>(out[sp.col]), static_cast<T*>(out[sp.acc]), sp.nacc,
          static_cast<T*>(out[sp.wide])};
}

template <class S>  // half_t or bfloat16_t
void to_float(const S* src, float* dst, int64_t n) {
  parallel_for(n, 65536, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dst[i] = Num<S>::ld(src[i]);
  });
}
template <class S>
void from_float(const float* src, S* dst, int64_t n) {
  parallel_for(n, 65536, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dst[i] = Num<S>::st(src[i]);
  });
}

template <class T>
KernelFn native(const KernelCtx& c, const Plan& p, int64_t out_elems) {
  const ScratchPlan sp = plan_scratch<T>(c, p, out_elems);
  return [p, sp, out_elems](const void* const* in, void* const* out) {
    Scratch<T> s = scratch_of<T>(sp, out);
    execute<T>(p, static_cast<const T*>(in[0]), static_cast<const T*>(in[1]), static_cast<T*>(out[0]), out_elems, s);
  };
}

template <class S>
KernelFn via_float(const KernelCtx& c, const Plan& p, int64_t n0, int64_t n1, int64_t out_elems) {
  const ScratchPlan sp = plan_scratch<float>(c, p, out_elems);
  const size_t i0 = c.scratch(size_t(n0) * sizeof(float)), i1 = c.scratch(size_t(n1) * sizeof(float)),
               io = c.scratch(size_t(out_elems) * sizeof(float));
  return [p, sp, i0, i1, io, n0, n1, out_elems](const void* const* in, void* const* out) {
    float *f0 = static_cast<float*>(out[i0]), *f1 = static_cast<float*>(out[i1]), *fo = static_cast<float*>(out[io]);
    to_float(static_cast<const S*>(in[0]), f0, n0);
    to_float(static_cast<const S*>(in[1]), f1, n1);
    Scratch<float> s = scratch_of<float>(sp, out);
    execute<float>(p, f0, f1, fo, out_elems, s);
    from_float(fo, static_cast<S*>(out[0]), out_elems);
  };
}

// The packed layout of a product of `columns` columns and depth K: planes for many columns,
// and for a few hundred at moderate depths (MobileNetV2's 14x14 1x1 layers); deep products of
// fewer than 512 columns run best along the channels (their depth blocks stay in L1).
bool planes_layout(int64_t columns, int64_t K) {
  return columns >= kPackedMinColumns || (columns >= kPlanesMinColumns && K <= kPlanesMaxDepth);
}

// The forward float32 kernel of the generic path, with an epilogue (empty: none).
KernelFn generic_forward(const KernelCtx& c, const ConvEpilogue& epilogue) {
  const bool constant = c.constants.size() > 1 && c.constants[1];
  Plan p = make_plan(Kind::Forward, c.node, c.in[0].shape, c.in[1].shape, c.out[0].shape, constant);
  // constant weights of one group: packed once here (BLAS would repack them on every call), in
  // the layout planes_layout picks for the product's columns and depth.
  // Projections of one image over few positions (MobileNetV2's 14x14 and 7x7 ones at batch 1):
  // each thread sums its part of the depth over every position (Plan::depth_parts). Halves of
  // the positions were thin products (2 x 98 columns ran as slow per column as 1 x 96 alone:
  // 38-40 against 68 us for 196 at 384 -> 64), and each thread read half of its source from the
  // other core, where the depthwise layer before it wrote those channels; the 7x7 ones' panels
  // of output channels read all of it. In planes (AVX-512) the parts share the panels; in the
  // channels layout (fewer than kPlanesMinColumns positions) each part's weights are packed on
  // their own, so the depth must divide evenly. A part per thread, each at least a depth block
  // (128) deep; with more threads than that the positions stay split (measured on two threads
  // only). MPSGRAPH_CPU_DEPTH_PARTS=0: as before.
  const int threads = num_threads();
  const float* weights = constant ? static_cast<const float*>(c.constants[1]->data()) : nullptr;
  const bool projection = constant && p.direct && p.N == 1 && p.G == 1 && p.CK >= 2 * p.O && threads > 1 &&
                          p.CK >= kDepthPartsMinDepth * threads && p.P <= kDepthPartsPositions && !p.stream_out &&
                          !switched_off("MPSGRAPH_CPU_DEPTH_PARTS");
  const bool planes_parts = projection && planes_layout(p.P, p.CK) && packed_depth_parts();
  if (projection && !planes_layout(p.P, p.CK) && p.CK % threads == 0) {
    const int64_t per = p.CK / threads;
    p.part_weights = make_packed_weights_group(weights, threads, per, p.O, per, p.CK, PackedLayout::Channels);
    if (!p.part_weights.empty()) p.packed = p.part_weights[0];
  }
  // One image through a 1x1 expansion (O >= 4 CK): the threads take panels of output channels,
  // each over every position, not halves of the positions. The depthwise layer after it splits
  // channels too, so each thread reads planes its own core wrote (MobileNetV2 at batch 1, the
  // 112x112 and 56x56 expansion + depthwise pairs: 1.07-1.24x; the expansions alone 1.1x). Its
  // layout is chosen for all the positions, so the 14x14 ones (196) run in planes too: alone on
  // two threads of the Xeon, 64 -> 384 took 38 against 47 us in halves along the channels, in
  // the network the steps added up to 1-3% less. Projections (K > O) keep the positions split:
  // every thread would read all of the wide source (their layers 0.74-0.87x).
  // MPSGRAPH_CPU_SPLIT_CHANNELS=0: positions.
  const bool expansion = p.direct && p.N == 1 && p.G == 1 && p.O >= 4 * p.CK && !p.stream_out && threads > 1 &&
                         !switched_off("MPSGRAPH_CPU_SPLIT_CHANNELS");
  const int64_t columns = planes_parts || expansion ? p.P : p.images > 1 ? p.images * p.P : std::min(p.P, p.tile);
  if (p.G == 1 && !p.depthwise && constant && p.O > 0 && p.CK > 0 && p.part_weights.empty())
    p.packed = make_packed_weights(weights, p.O, p.CK, p.CK,
                                   planes_layout(columns, p.CK) ? PackedLayout::Planes : PackedLayout::Channels);
  if ((planes_parts || !p.part_weights.empty()) && p.packed) p.depth_parts = threads;
  p.split_channels = p.packed && packed_planes(*p.packed) && expansion;
  if (constant && !p.packed)  // not packed after all (MPSGRAPH_CPU_PACKED=0, no AVX2): BLAS's split
    p = make_plan(Kind::Forward, c.node, c.in[0].shape, c.in[1].shape, c.out[0].shape, false);
  // A pooled epilogue: units of whole row pairs pool as they go where the units are the pool's
  // (packed weights, one image a product); elsewhere the whole output is pooled after.
  // Tiles grow to whole row pairs only where that leaves as many units as there are slots.
  if (epilogue.pool && p.packed && p.ours && !p.depthwise && !p.split_channels && !p.depth_parts && p.images == 1 &&
      p.G == 1 && p.OL == epilogue.OW && p.P == epilogue.OH * epilogue.OW) {
    Plan q = p;
    const int64_t pair = 2 * p.OL;
    q.pool_tiles = true;
    q.tile = std::min(p.P, (p.tile + pair - 1) / pair * pair);
    q.ntiles = (p.P + q.tile - 1) / q.tile;
    q.col_elems = p.direct ? 0 : p.CK * q.tile;
    if (q.units() >= p.slots) p = std::move(q);
  }
  const int64_t out_elems = num_elements(c.out[0].shape);
  const ScratchPlan sp = plan_scratch<float>(c, p, out_elems);
  KernelFn f = [p, sp, out_elems, epilogue, row = row_epilogue(epilogue)](const void* const* in, void* const* out) {
    Scratch<float> s = scratch_of<float>(sp, out);
    const Epi epi{&epilogue, reinterpret_cast<const float* const*>(in + 2), &row};
    execute<float>(p, static_cast<const float*>(in[0]), static_cast<const float*>(in[1]), static_cast<float*>(out[0]),
                   out_elems, s, epi);
  };
  return epilogue.pool && !p.pool_tiles ? pool_after(std::move(f), epilogue, c.out.size() + c.scratch_bytes.size()) : f;
}

}  // namespace

KernelFn make_convolution_kernel(const KernelCtx& c, const ConvEpilogue& epilogue) {
  auto generic = [&epilogue](const KernelCtx& k) { return generic_forward(k, epilogue); };
  if (KernelFn f = make_winograd_kernel(c, &epilogue, generic)) return f;
  return generic_forward(c, epilogue);  // (which pools where the epilogue does)
}

namespace {

KernelFactory factory(Kind kind) {
  return [kind](const KernelCtx& c) -> KernelFn {
    const Shape *src, *w, *dy;
    switch (kind) {
      case Kind::Forward: src = &c.in[0].shape; w = &c.in[1].shape; dy = &c.out[0].shape; break;
      case Kind::Data: dy = &c.in[0].shape; w = &c.in[1].shape; src = &c.out[0].shape; break;
      default: dy = &c.in[0].shape; src = &c.in[1].shape; w = &c.out[0].shape; break;
    }
    Plan p = make_plan(kind, c.node, *src, *w, *dy);
    const int64_t n0 = num_elements(c.in[0].shape), n1 = num_elements(c.in[1].shape), no = num_elements(c.out[0].shape);
    switch (c.out[0].dtype) {
      case DType::Float32:
        if (kind == Kind::Forward) {
          auto generic = [](const KernelCtx& k) { return generic_forward(k, {}); };
          if (KernelFn f = make_winograd_kernel(c, nullptr, generic)) return f;
          return generic(c);
        }
        return native<float>(c, p, no);
      case DType::Float64: return native<double>(c, p, no);
      case DType::Float16: return via_float<half_t>(c, p, n0, n1, no);
      case DType::BFloat16: return via_float<bfloat16_t>(c, p, n0, n1, no);
      default:
        raise(ErrorKind::Type, c.node.op->name, c.node.name,
              std::string("expects a floating-point dtype, got ") + dtype_name(c.out[0].dtype));
    }
  };
}

}  // namespace

void register_convolution_kernels() {
  register_kernel("convolution", factory(Kind::Forward));
  register_kernel("convolution_data_gradient", factory(Kind::Data));
  register_kernel("convolution_weights_gradient", factory(Kind::Weights));
}

}  // namespace mg::cpu

// The front of a batched network run one image at a time. Layer after layer over a whole batch,
// each layer's output (MobileNetV2 at batch 8: up to 38 MB) leaves the cores' caches before the
// next layer reads it; one image's (4.8 MB at most, mostly under 2 MB) stays in its core's L2.
// So the nodes of the front, where activations are large and weights small, run as a program
// compiled for one image, one image per thread; the rest of the graph (layers whose weights
// outweigh an image's activations, the classifier) runs over the whole batch as before.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "core/specialise.h"

namespace mg::cpu {

struct ImageSplit {
  int64_t batch = 0;
  Specialised front;  // one image; its targets are the frontier values
  Specialised rest;   // the batch: sg's feeds (those it still reads), then the frontier it reads
  // per feed of `front`: the index of sg's feed it reads, and whether it reads one image of it
  // (the batched feeds) or all of it (parameters fed at run time)
  std::vector<size_t> front_feed;
  std::vector<char> front_feed_batched;
  // per frontier value (front's targets): its type over the batch, and the first of sg's
  // targets that it is (-1: none; the front then writes into that output)
  std::vector<TensorType> frontier_types;
  std::vector<int> frontier_target;
  std::vector<size_t> rest_frontier;  // rest's feeds after sg's: frontier indices
  std::vector<size_t> rest_target;    // per target of `rest`: the index of sg's target
  std::vector<std::pair<size_t, size_t>> target_copies;  // (sg's target, frontier index): copied
};

// A split for `threads` threads, or none: the batch (dim 0 of the first fed placeholder of
// rank >= 2) must spread evenly enough over the threads, and the front must hold at least two
// layers. Off with MPSGRAPH_CPU_IMAGE_SPLIT=0.
std::optional<ImageSplit> plan_image_split(const Specialised& sg, int threads);

}  // namespace mg::cpu

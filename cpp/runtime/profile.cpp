#include "runtime/profile.h"

#include <atomic>
#include <mutex>
#include <string>
#include <utility>

namespace mg {

namespace {
std::atomic<bool> g_on{false};
std::mutex g_mu;
ProfileTotals& table() {
  static auto* t = new ProfileTotals();  // never destroyed: runs may outlive exit
  return *t;
}
}  // namespace

bool profiling_enabled() { return g_on.load(std::memory_order_relaxed); }
void set_profiling(bool on) { g_on = on; }

namespace {
void add(OpProfile& p, double seconds) {
  p.seconds += seconds;
  p.calls += 1;
}

void record(const char* kernel_op, const char* graph_op, double seconds, const std::string* step) {
  std::lock_guard<std::mutex> l(g_mu);
  add(table().kernels[kernel_op], seconds);
  add(table().graph_ops[graph_op], seconds);
  if (step) add(table().steps[*step], seconds);
}
}  // namespace

void record_profile(const char* kernel_op, const char* graph_op, double seconds) {
  record(kernel_op, graph_op, seconds, nullptr);
}

void record_profile(const char* kernel_op, const char* graph_op, double seconds, const std::string& step) {
  record(kernel_op, graph_op, seconds, &step);
}

ProfileTotals take_profile() {
  std::lock_guard<std::mutex> l(g_mu);
  ProfileTotals r = std::move(table());
  table() = ProfileTotals{};
  return r;
}

}  // namespace mg

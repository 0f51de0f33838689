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

void record_profile(const char* kernel_op, const char* graph_op, double seconds) {
  std::lock_guard<std::mutex> l(g_mu);
  auto& k = table().kernels[kernel_op];
  k.seconds += seconds;
  k.calls += 1;
  auto& g = table().graph_ops[graph_op];
  g.seconds += seconds;
  g.calls += 1;
}

void record_profile(const char* kernel_op, const char* graph_op, double seconds, const std::string& step) {
  record_profile(kernel_op, graph_op, seconds);
  std::lock_guard<std::mutex> l(g_mu);
  auto& st = table().steps[step];
  st.seconds += seconds;
  st.calls += 1;
}

ProfileTotals take_profile() {
  std::lock_guard<std::mutex> l(g_mu);
  ProfileTotals r = std::move(table());
  table() = ProfileTotals{};
  return r;
}

}  // namespace mg

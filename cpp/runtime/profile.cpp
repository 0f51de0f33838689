#include "runtime/profile.h"

#include <atomic>
#include <mutex>
#include <utility>

namespace mg {

namespace {
std::atomic<bool> g_on{false};
std::mutex g_mu;
std::map<std::string, OpProfile>& table() {
  static std::map<std::string, OpProfile> t;
  return t;
}
}  // namespace

bool profiling_enabled() { return g_on.load(std::memory_order_relaxed); }
void set_profiling(bool on) { g_on = on; }

void record_profile(const char* op, double seconds) {
  std::lock_guard<std::mutex> l(g_mu);
  auto& e = table()[op];
  e.seconds += seconds;
  e.calls += 1;
}

std::map<std::string, OpProfile> take_profile() {
  std::lock_guard<std::mutex> l(g_mu);
  auto r = std::move(table());
  table().clear();
  return r;
}

}  // namespace mg

// Per-op time accounting for backends (off unless asked for: one branch per step).
#pragma once
#include <map>
#include <string>

namespace mg {

struct OpProfile {
  double seconds = 0;
  long calls = 0;
};

bool profiling_enabled();
void set_profiling(bool on);
// kernel_op: what ran; graph_op: the op of the graph the user built that it belongs to
// (a composite such as softmax, or the kernel's op itself).
void record_profile(const char* kernel_op, const char* graph_op, double seconds);
// The same, also under `step`: one compiled step (its node, kernel and operand types), so a
// profile can say which of several layers of one op takes the time.
void record_profile(const char* kernel_op, const char* graph_op, double seconds, const std::string& step);
struct ProfileTotals {
  std::map<std::string, OpProfile> graph_ops, kernels, steps;
};
ProfileTotals take_profile();  // returns and clears the totals

}  // namespace mg

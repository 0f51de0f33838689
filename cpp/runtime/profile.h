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
void record_profile(const char* op, double seconds);
std::map<std::string, OpProfile> take_profile();  // returns and clears the totals

}  // namespace mg

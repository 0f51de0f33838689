// Typed errors carrying the op and node at fault; bindings map them to Python classes.
#pragma once
#include <stdexcept>
#include <string>

namespace mg {

enum class ErrorKind { Value, Type, Index, Runtime, NotImplemented };

class GraphError : public std::runtime_error {
 public:
  GraphError(ErrorKind kind, const std::string& msg) : std::runtime_error(msg), kind(kind) {}
  ErrorKind kind;
};

// "[op] message (node 'name')"
[[noreturn]] void raise(ErrorKind kind, const std::string& op, const std::string& node, const std::string& msg);

}  // namespace mg

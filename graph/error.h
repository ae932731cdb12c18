// onyx::Error: the one exception type for everything a user can cause.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <string>

namespace onyx {

/// Thrown for bad input: malformed models, wrong dtypes or shapes, missing files.
/// Messages start with the component in brackets, e.g. "[Conv node 'c1'] ...".
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// Thrown when an op, opset or dtype is valid ONNX but not implemented here.
class NotImplemented : public Error {
 public:
  explicit NotImplemented(const std::string& what) : Error(what) {}
};

}  // namespace onyx

/// Throws onyx::Error with a fmt-formatted message when `cond` is false.
#define ONYX_CHECK(cond, ...)                                \
  do {                                                       \
    if (!(cond)) throw ::onyx::Error(::fmt::format(__VA_ARGS__)); \
  } while (0)

/// Throws onyx::Error with a fmt-formatted message.
#define ONYX_THROW(...) throw ::onyx::Error(::fmt::format(__VA_ARGS__))

#pragma once
// The message of the kiln::Error that f throws, or "<no error>".
#include <functional>
#include <string>

#include "kiln/error.h"

namespace kiln::testing {
inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}
}  // namespace kiln::testing

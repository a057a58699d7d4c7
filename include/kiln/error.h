#pragma once
// kiln::Error and the checking macros. User-facing problems throw kiln::Error
// with a message a user can act on; nothing aborts on user input.
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace kiln {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// A valid input that Kiln cannot handle (an ONNX op, dtype or attribute value
// it lacks), as opposed to a malformed one. `missing_ops` lists op types that
// have no implementation, when that is the reason.
class UnsupportedError : public Error {
 public:
  explicit UnsupportedError(const std::string& msg, std::vector<std::string> missing_ops = {})
      : Error(msg), missing_ops(std::move(missing_ops)) {}
  std::vector<std::string> missing_ops;
};

namespace detail {
inline void append_all(std::ostringstream&) {}
template <typename T, typename... Rest>
void append_all(std::ostringstream& os, const T& v, const Rest&... rest) {
  os << v;
  append_all(os, rest...);
}
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  append_all(os, args...);
  return os.str();
}
[[noreturn]] void throw_error(const std::string& msg);
[[noreturn]] void assert_fail(const char* cond, const char* file, int line, const std::string& msg);
}  // namespace detail
}  // namespace kiln

// Throws kiln::Error built from the remaining arguments when cond is false.
#define KILN_CHECK(cond, ...)                                                  \
  do {                                                                         \
    if (__builtin_expect(!(cond), 0))                                          \
      ::kiln::detail::throw_error(::kiln::detail::concat(__VA_ARGS__));        \
  } while (0)

#define KILN_FAIL(...) ::kiln::detail::throw_error(::kiln::detail::concat(__VA_ARGS__))

// Internal invariants only: a failure here is a bug in Kiln, not in user input.
#define KILN_ASSERT(cond, ...)                                                 \
  do {                                                                         \
    if (__builtin_expect(!(cond), 0))                                          \
      ::kiln::detail::assert_fail(#cond, __FILE__, __LINE__,                   \
                                  ::kiln::detail::concat(__VA_ARGS__));        \
  } while (0)

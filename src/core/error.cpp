#include "kiln/error.h"

#include <cstdio>
#include <cstdlib>

namespace kiln::detail {

void throw_error(const std::string& msg) { throw Error(msg); }

void assert_fail(const char* cond, const char* file, int line, const std::string& msg) {
  // An internal invariant broke: report it as a bug, but still as an exception
  // so that a server embedding Kiln can keep running.
  throw Error(concat("internal error (please report): ", cond, " failed at ", file, ":", line,
                     msg.empty() ? "" : ": ", msg));
}

}  // namespace kiln::detail

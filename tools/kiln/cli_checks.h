#pragma once
// Option checks shared by the CLI's commands, with messages that say what a
// value must be (CLI11's own number checks print the type's whole range).
#include <CLI/CLI.hpp>
#include <string>

#include "kiln/grad_mode.h"

namespace kiln::cli {

// A whole number of at least 1.
inline CLI::Validator positive_count() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        try {
          size_t used = 0;
          if (std::stoll(v, &used) >= 1 && used == v.size()) return "";
        } catch (const std::exception&) {
        }
        return "must be a whole number of at least 1, not '" + v + "'";
      },
      "N>=1");
}

// The precisions Kiln computes in: float32, or a half-precision float.
inline CLI::IsMember precisions() { return CLI::IsMember(precision_names()); }

}  // namespace kiln::cli

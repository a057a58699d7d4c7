#pragma once
// Option checks shared by the CLI's commands, with messages that say what a
// value must be (CLI11's own number checks print the type's whole range).
#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>
#include <system_error>

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

// A folder to write into, made here (with its parents) if it is not there,
// so that a path that cannot be one fails before any work, not after it.
inline CLI::Validator writable_folder() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        std::error_code ec;
        std::filesystem::create_directories(v, ec);
        if (ec || !std::filesystem::is_directory(v))
          return "cannot make the folder '" + v + "' (" + (ec ? ec.message() : "a file has that name") +
                 "); give a folder you can write to";
        return "";
      },
      "FOLDER");
}

}  // namespace kiln::cli

#pragma once
// Runs the kiln CLI (KILN_CLI) as a user would: its exit status and what it
// printed on stdout and stderr.
#include <array>
#include <cstdio>
#include <string>
#include <utility>

namespace kiln::testing {

inline std::pair<int, std::string> run_kiln(const std::string& args) {
  std::string out, command = KILN_CLI;  // appended: GCC 12 warns falsely (-Wrestrict) on chained +
  command += " ";
  command += args;
  command += " 2>&1";
  FILE* p = ::popen(command.c_str(), "r");
  std::array<char, 4096> buf;
  while (size_t n = std::fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  return {::pclose(p), out};
}

}  // namespace kiln::testing

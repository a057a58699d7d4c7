#pragma once
// The one file a fuzz target rewrites for every input, named after the
// process and removed when it exits, so fuzz runs leave nothing in /tmp.
#include <unistd.h>

#include <cstdio>
#include <string>

struct ScratchFile {
  explicit ScratchFile(const std::string& stem, const std::string& extension = "")
      : path("/tmp/" + stem + "_" + std::to_string(::getpid()) + extension) {}
  ~ScratchFile() { std::remove(path.c_str()); }
  const std::string path;
};

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
  // Replaces the file's contents with these bytes; false when it cannot.
  bool write(const void* data, size_t size) const {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) return false;
    const bool whole = std::fwrite(data, 1, size, f) == size;
    return std::fclose(f) == 0 && whole;
  }
  const std::string path;
};

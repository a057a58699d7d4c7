#pragma once
// Decisions a backend measures on this machine (which convolution algorithm
// is fastest for a layer's geometry), kept on disk so that the next process
// reads them instead of timing again: compiling ResNet-50 timed its
// candidates for 1.2 s of its 1.4 s. A file per machine and build, named by
// a fingerprint of the CPU (its model, the instruction sets and caches) and
// of the library file itself, so that another machine, or a rebuilt kernel,
// never reads another's answers; each line "table key value", appended with
// one write (O_APPEND), so processes that tune at once lose nothing, and a
// torn or foreign line is skipped. The folder: KILN_CACHE_DIR, else
// $XDG_CACHE_HOME/kiln, else ~/.cache/kiln; KILN_CACHE_DIR=off keeps the
// decisions in the process only. Where the folder cannot be written, they
// stay in the process too: the cache only saves time. A new file's first
// write removes the folder's tuning files untouched for 30 days.
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

namespace kiln::tuning {

class TuningCache {
 public:
  // file: the cache file ("" keeps everything in memory).
  explicit TuningCache(std::string file);

  std::optional<std::string> lookup(const std::string& table, const std::string& key);
  // Keys and values are single words (no spaces or line breaks).
  void remember(const std::string& table, const std::string& key, const std::string& value);
  const std::string& file() const { return file_; }

 private:
  void load();
  std::string file_;
  std::mutex mu_;
  bool loaded_ = false;
  std::map<std::pair<std::string, std::string>, std::string> entries_;
};

// The process's cache, in the folder the environment names now (a change
// of KILN_CACHE_DIR opens the new folder's file).
TuningCache& machine_cache();

// This machine and build, as the cache file's name has it.
std::string machine_fingerprint();

}  // namespace kiln::tuning

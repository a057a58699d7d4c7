#pragma once
// Runs the registered Google Benchmarks, then prints each Kiln figure next to
// its peer's from the same run, as a ratio. Benchmarks are named
// "<group>/kiln..." and "<group>/<peer>..." and report one rate counter.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace kiln::bench {

// Shared machines swing from minute to minute: interleave the runs of Kiln and
// its peer and compare medians. Flags given on the command line still win.
inline void initialize(int* argc, char** argv) {
  // The CPU the figures come from: runs on other machines are not comparable.
  if (std::FILE* info = std::fopen("/proc/cpuinfo", "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, info))
      if (std::string(line).rfind("model name", 0) == 0) {
        std::printf("CPU: %s", std::strchr(line, ':') ? std::strchr(line, ':') + 2 : line);
        break;
      }
    std::fclose(info);
  }
  static std::vector<std::string> storage;
  static std::vector<char*> args;
  storage = {argv[0], "--benchmark_repetitions=5", "--benchmark_enable_random_interleaving=true",
             "--benchmark_report_aggregates_only=true"};
  for (int i = 1; i < *argc; ++i) storage.push_back(argv[i]);
  for (auto& s : storage) args.push_back(s.data());
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
}

class RatioReporter : public benchmark::ConsoleReporter {
 public:
  explicit RatioReporter(std::string counter) : counter_(std::move(counter)) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      auto it = r.counters.find(counter_);
      bool aggregate = r.run_type == Run::RT_Aggregate;
      if (it != r.counters.end() && (!aggregate || r.aggregate_name == "median"))
        results_.push_back({r.benchmark_name(), it->second.value});
    }
  }
  // Pairs results whose names differ only in the implementation segment.
  void print_ratios(const std::string& kiln_tag, const std::string& peer_tag, double higher_is_better_sign = 1) const {
    std::printf("\n%-48s %14s %14s %8s\n", ("kiln vs " + peer_tag).c_str(), ("kiln " + counter_).c_str(),
                (peer_tag + " " + counter_).c_str(), "ratio");
    for (auto& [name, value] : results_) {
      auto at = name.find(kiln_tag);
      if (at == std::string::npos) continue;
      std::string peer_name = name.substr(0, at) + peer_tag + name.substr(at + kiln_tag.size());
      for (auto& [pn, pv] : results_) {
        if (pn != peer_name) continue;
        double ratio = higher_is_better_sign > 0 ? value / pv : pv / value;
        std::printf("%-48s %14.2f %14.2f %7.2fx\n", name.c_str(), value, pv, ratio);
      }
    }
  }

 private:
  std::string counter_;
  std::vector<std::pair<std::string, double>> results_;
};

}  // namespace kiln::bench

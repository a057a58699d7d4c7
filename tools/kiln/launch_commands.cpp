// `kiln launch` (start the ranks of a job on this host) and `kiln logs`
// (read, filter and follow their logs).
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>

#include "kiln/error.h"
#include "kiln/launch.h"

namespace kiln::cli {
namespace {
volatile std::sig_atomic_t stop_following = 0;
void on_stop(int) { stop_following = 1; }

void print(const dist::LogLine& l) {
  const std::string text = dist::format_log_line(l) + "\n";
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}
}  // namespace

void add_launch_commands(CLI::App& app) {
  static dist::LaunchOptions o;
  auto* launch = app.add_subcommand(
      "launch", "Start the ranks of a distributed job on this host; per-rank logs; a failing rank stops the job");
  launch->add_option("-n,--nproc", o.nproc, "Ranks on this host")->required();
  launch->add_option("--nnodes", o.nnodes, "Hosts in the job (start kiln launch on each)");
  launch->add_option("--node-rank", o.node_rank, "This host's place among them, from 0");
  launch->add_option("--master", o.master, "HOST:PORT of rank 0's rendezvous store (default: this host, a free port)");
  launch->add_option("--log-dir", o.log_dir, "Where rank-K.log files go")->capture_default_str();
  launch->add_option("command", o.command, "The command each rank runs, after --")->required();
  launch->callback([] {
    const int code = dist::launch(o);
    if (code != 0) throw CLI::RuntimeError(code);
  });

  static std::string dir = "logs";
  static int rank = -1;
  static std::string grep;
  static bool follow = false;
  auto* logs = app.add_subcommand("logs", "Read the per-rank logs of kiln launch, merged in time order");
  logs->add_option("dir", dir, "The log folder (or a folder holding logs/)")->capture_default_str();
  logs->add_option("--rank", rank, "Only this rank's lines");
  logs->add_option("--grep", grep, "Only lines matching this word or regular expression");
  logs->add_flag("-f,--follow", follow, "Keep printing new lines as the ranks write them (Ctrl-C stops)");
  logs->callback([] {
    dist::LogQuery q;
    if (rank >= 0) q.rank = rank;
    q.pattern = grep;
    if (!follow) {
      for (const auto& l : dist::read_logs(dir, q)) print(l);
      return;
    }
    std::signal(SIGINT, on_stop);
    std::signal(SIGTERM, on_stop);
    dist::follow_logs(dir, q, print, [] { return stop_following == 0; });
  });
}

}  // namespace kiln::cli

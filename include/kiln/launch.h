#pragma once
// kiln launch: starts the ranks of a job on this host, with the launcher
// variables dist::init reads (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), shows each output line on the
// terminal prefixed with its rank, keeps one log per rank whose lines carry
// time, host and rank, and when a rank fails stops the others and says which
// failed, how, and what it printed last. kiln logs reads those logs back.
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kiln::dist {

struct LaunchOptions {
  int nproc = 1;       // ranks on this host
  int nnodes = 1;      // hosts in the job
  int node_rank = 0;   // this host's place among them
  std::string master;  // HOST:PORT of rank 0's store; one host: 127.0.0.1 and a free port
  std::string log_dir = "logs";
  std::vector<std::string> command;
  // After a rank fails, how long the others get to stop (SIGTERM) before SIGKILL.
  std::chrono::milliseconds grace{std::chrono::seconds(5)};
  bool echo = true;  // copy the prefixed lines to standard output
};

// Runs the ranks until all have exited. Returns 0 when every rank
// succeeded, else the exit status of the first rank that failed (128 + the
// signal when a signal ended it). Throws kiln::Error for bad options.
int launch(const LaunchOptions& options);

// One line of a rank's log: "2026-12-03T10:15:02.123456Z HOST rank K | TEXT".
struct LogLine {
  std::string time;  // UTC, ISO 8601, sortable as text
  std::string host;
  int rank = 0;
  std::string text;
};
std::string format_log_line(const LogLine& line);
std::optional<LogLine> parse_log_line(const std::string& line);

struct LogQuery {
  std::optional<int> rank;
  std::string pattern;  // a regular expression (a plain word matches itself); empty: every line
};
// The lines of every rank-K.log in `dir` (or in dir/logs), merged in time
// order, that match the query. Throws kiln::Error when there are none to read.
std::vector<LogLine> read_logs(const std::string& dir, const LogQuery& query);
// Follows the logs like tail -f: every matching line already there (in
// time order), then new ones as ranks write them (new rank files too),
// checking every `every` until keep_going() says stop.
void follow_logs(const std::string& dir, const LogQuery& query, const std::function<void(const LogLine&)>& emit,
                 const std::function<bool()>& keep_going,
                 std::chrono::milliseconds every = std::chrono::milliseconds(200));
// The log files read_logs reads, by rank.
std::vector<std::pair<int, std::string>> log_files(const std::string& dir);

}  // namespace kiln::dist

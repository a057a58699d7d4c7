#pragma once
// The profiler: per-op records (name, type, backend, input shapes, time,
// bytes; on a device that works asynchronously, the kernel's time there
// too) from every dispatched op, named ranges (a training step, the wait
// for its data), a summary sorted by total time, the same grouped by op type,
// and a Chrome trace that opens in Perfetto. Off, it costs one relaxed atomic
// load per op.
//
//   { profiler::Scope scope; model.train(1, data); }
//   std::puts(profiler::summary().c_str());
//   profiler::write_chrome_trace("trace.json");
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kiln::profiler {

struct Record {
  std::string name;     // the op ("conv2d") or the range ("step", "data")
  std::string type;     // op category (elementwise, reduction, matmul, ...) or "range"
  std::string backend;  // "cpu"
  std::string shapes;   // input shapes, "float32[64, 1, 28, 28], float32[32, 1, 3, 3]"
  int64_t start_ns = 0, duration_ns = 0;  // on the host: for a device that queues work, the launch
  int64_t device_ns = -1;                 // on such a device, between events around the kernel; -1 elsewhere
  int64_t bytes = 0;    // read and written
  bool fallback = false;  // ran on the CPU because its backend had no kernel
  int thread = 0;
};

void start();  // clears earlier records
void stop();
bool enabled();
std::vector<Record> records();  // all threads', by start time

class Scope {
 public:
  Scope() { start(); }
  ~Scope() { stop(); }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
};

// Times a named region while profiling (e.g. "step", "data").
class Range {
 public:
  explicit Range(const char* name);
  ~Range();
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  const char* name_;
  int64_t start_ns_ = -1;
};

// Tables: ops by total time (calls, total, mean, min, max, share, bytes,
// fallback, and the device's time where it was measured), the same by op type, and the ranges (with the share of step
// time spent waiting for data).
std::string summary();
void write_chrome_trace(const std::string& path);
// An HTML page with the tables and a bar chart of the top ops.
void write_html_report(const std::string& path, const std::string& title = "Kiln profile");
// The three into dir (made if missing): profile.txt (summary), trace.json
// and report.html.
void write_folder(const std::string& dir, const std::string& title = "Kiln profile");

namespace detail {
bool active();  // the fast check in dispatch
int64_t now_ns();
void record_op(Record record);
// A record whose device time `device_ns` gives when the profile is read (it
// waits for the device's events), or earlier once enough are pending.
void record_op(Record record, std::function<int64_t()> device_ns);
}  // namespace detail

}  // namespace kiln::profiler

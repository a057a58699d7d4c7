// Records live in per-thread buffers (no lock on the hot path); the buffers
// register themselves once, under a mutex, and are gathered on demand.
#include "kiln/profiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "kiln/error.h"

namespace kiln::profiler {
namespace {

std::atomic<bool> g_active{false};
std::atomic<uint64_t> g_generation{0};  // bumps on start(): stale thread buffers are cleared lazily

struct ThreadBuffer {
  std::mutex mu;  // taken by the owner per record only while profiling, and by readers
  std::vector<Record> records;
  // Records whose device time is still in the device's events. A backend
  // keeps a bounded ring of events, so they are read before it wraps.
  std::vector<std::pair<size_t, std::function<int64_t()>>> pending;
  uint64_t generation = 0;
  int thread = 0;
  void resolve() {
    for (auto& [at, device_ns] : pending) records[at].device_ns = device_ns();
    pending.clear();
  }
};
constexpr size_t kMaxPending = 512;

std::mutex g_registry_mu;
std::vector<std::shared_ptr<ThreadBuffer>>& registry() {
  static std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  return buffers;
}

ThreadBuffer& local_buffer() {
  thread_local std::shared_ptr<ThreadBuffer> buffer = [] {
    auto b = std::make_shared<ThreadBuffer>();
    std::lock_guard<std::mutex> lock(g_registry_mu);
    b->thread = static_cast<int>(registry().size());
    registry().push_back(b);
    return b;
  }();
  return *buffer;
}

struct Stats {
  int64_t calls = 0, total = 0, min = INT64_MAX, max = 0, bytes = 0, fallbacks = 0, device = 0, device_calls = 0;
  void add(const Record& r) {
    ++calls;
    total += r.duration_ns;
    if (r.device_ns >= 0) device += r.device_ns, ++device_calls;
    min = std::min(min, r.duration_ns);
    max = std::max(max, r.duration_ns);
    bytes += r.bytes;
    fallbacks += r.fallback;
  }
};

std::vector<std::pair<std::string, Stats>> grouped(const std::vector<Record>& records, bool by_type, bool ranges) {
  std::map<std::string, Stats> m;
  for (const auto& r : records)
    if (r.type != "compile" && (r.type == "range") == ranges) m[by_type ? r.type : r.name].add(r);
  std::vector<std::pair<std::string, Stats>> out(m.begin(), m.end());
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.second.total > b.second.total; });
  return out;
}

// With a "device ms" column where any op's device time was measured.
std::string table(const char* title, const std::vector<std::pair<std::string, Stats>>& rows) {
  int64_t all = 0;
  bool device = false;
  for (auto& [_, s] : rows) all += s.total, device = device || s.device_calls > 0;
  std::string out = title;
  char line[256];
  std::snprintf(line, sizeof(line), "\n%-28s %8s %11s %10s %10s %10s %7s %11s %8s%s\n", "", "calls", "total ms",
                "mean us", "min us", "max us", "share", "MB", "fallback", device ? "  device ms" : "");
  out += line;
  for (auto& [name, s] : rows) {
    std::snprintf(line, sizeof(line), "%-28.28s %8lld %11.3f %10.2f %10.2f %10.2f %6.1f%% %11.2f %8lld", name.c_str(),
                  static_cast<long long>(s.calls), s.total / 1e6, s.total / 1e3 / static_cast<double>(s.calls),
                  s.min / 1e3, s.max / 1e3, all ? 100.0 * static_cast<double>(s.total) / static_cast<double>(all) : 0.0,
                  static_cast<double>(s.bytes) / 1e6, static_cast<long long>(s.fallbacks));
    out += line;
    if (device) {
      if (s.device_calls > 0)
        std::snprintf(line, sizeof(line), " %10.3f", s.device / 1e6);
      else
        std::snprintf(line, sizeof(line), " %10s", "-");
      out += line;
    }
    out += "\n";
  }
  return out;
}

}  // namespace

namespace detail {
bool active() { return g_active.load(std::memory_order_relaxed); }

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {
// A buffer filled before the last start() holds the earlier profile's records.
void clear_if_stale(ThreadBuffer& b) {
  uint64_t gen = g_generation.load(std::memory_order_relaxed);
  if (b.generation == gen) return;
  b.records.clear();
  b.pending.clear();
  b.generation = gen;
}
}  // namespace

void record_op(Record record) {
  ThreadBuffer& b = local_buffer();
  std::lock_guard<std::mutex> lock(b.mu);
  clear_if_stale(b);
  record.thread = b.thread;
  b.records.push_back(std::move(record));
}

void record_op(Record record, std::function<int64_t()> device_ns) {
  ThreadBuffer& b = local_buffer();
  std::lock_guard<std::mutex> lock(b.mu);
  clear_if_stale(b);
  record.thread = b.thread;
  b.records.push_back(std::move(record));
  b.pending.emplace_back(b.records.size() - 1, std::move(device_ns));
  if (b.pending.size() >= kMaxPending) b.resolve();
}
}  // namespace detail

void start() {
  g_generation.fetch_add(1);
  std::lock_guard<std::mutex> lock(g_registry_mu);
  for (auto& b : registry()) {
    std::lock_guard<std::mutex> l(b->mu);
    b->records.clear();
    b->pending.clear();
    b->generation = g_generation.load();
  }
  g_active.store(true);
}

void stop() { g_active.store(false); }
bool enabled() { return g_active.load(); }

std::vector<Record> records() {
  std::vector<Record> out;
  std::lock_guard<std::mutex> lock(g_registry_mu);
  uint64_t gen = g_generation.load();
  for (auto& b : registry()) {
    std::lock_guard<std::mutex> l(b->mu);
    if (b->generation != gen) continue;
    b->resolve();
    out.insert(out.end(), b->records.begin(), b->records.end());
  }
  std::sort(out.begin(), out.end(), [](const Record& a, const Record& b) { return a.start_ns < b.start_ns; });
  return out;
}

Range::Range(const char* name) : name_(name) {
  if (detail::active()) start_ns_ = detail::now_ns();
}

Range::~Range() {
  if (start_ns_ < 0) return;
  Record r;
  r.name = name_;
  r.type = "range";
  r.start_ns = start_ns_;
  r.duration_ns = detail::now_ns() - start_ns_;
  detail::record_op(std::move(r));
}

std::string summary() {
  auto recs = records();
  std::string out = table("ops by total time", grouped(recs, false, false));
  out += "\n" + table("op types by total time", grouped(recs, true, false));
  auto ranges = grouped(recs, false, true);
  if (!ranges.empty()) {
    out += "\n" + table("ranges", ranges);
    int64_t data = 0, step = 0;
    for (auto& [name, s] : ranges) {
      if (name == "data") data = s.total;
      if (name == "step") step = s.total;
    }
    if (data + step > 0) {
      char line[160];
      std::snprintf(line, sizeof(line), "waiting for data: %.1f%% of the training loop (%.3f ms of %.3f ms)\n",
                    100.0 * static_cast<double>(data) / static_cast<double>(data + step), data / 1e6,
                    (data + step) / 1e6);
      out += line;
    }
  }
  // Graphs compiled while profiling (a new shape, a changed weight), with what caused each.
  std::map<std::pair<std::string, std::string>, std::pair<int, int64_t>> compiles;  // (graph, cause) -> count, ns
  int count = 0;
  int64_t total = 0;
  for (const auto& r : recs)
    if (r.type == "compile") {
      auto& [n, ns] = compiles[{r.name, r.shapes}];
      ++n, ns += r.duration_ns, ++count, total += r.duration_ns;
    }
  if (count > 0) {
    char line[160];
    std::snprintf(line, sizeof(line), "\ncompiles: %d, %.1f ms\n", count, total / 1e6);
    out += line;
    for (const auto& [what, c] : compiles) {
      std::snprintf(line, sizeof(line), "  %4d x graph '", c.first);
      out += line + what.first + "': " + what.second;
      std::snprintf(line, sizeof(line), " (%.1f ms)\n", c.second / 1e6);
      out += line;
    }
  }
  return out;
}

void write_chrome_trace(const std::string& path) {
  auto recs = records();
  int64_t t0 = recs.empty() ? 0 : recs.front().start_ns;
  nlohmann::json events = nlohmann::json::array();
  for (const auto& r : recs) {
    nlohmann::json e{{"name", r.name}, {"cat", r.type}, {"ph", "X"}, {"pid", 0}, {"tid", r.thread},
                     {"ts", static_cast<double>(r.start_ns - t0) / 1e3}, {"dur", static_cast<double>(r.duration_ns) / 1e3}};
    if (r.type != "range")
      e["args"] = {{"shapes", r.shapes}, {"bytes", r.bytes}, {"backend", r.backend}, {"fallback", r.fallback}};
    if (r.device_ns >= 0) e["args"]["device_us"] = static_cast<double>(r.device_ns) / 1e3;
    events.push_back(std::move(e));
  }
  std::ofstream f(path);
  KILN_CHECK(f.good(), "profiler: cannot write '", path, "'");
  f << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() << "\n";
  KILN_CHECK(f.good(), "profiler: writing '", path, "' failed (disk full?)");
}

void write_html_report(const std::string& path, const std::string& title) {
  auto ops = grouped(records(), false, false);
  int64_t all = 0;
  for (auto& [_, s] : ops) all += s.total;
  std::string bars;
  for (size_t i = 0; i < ops.size() && i < 15; ++i) {
    double share = all ? 100.0 * static_cast<double>(ops[i].second.total) / static_cast<double>(all) : 0.0;
    char row[512];
    std::snprintf(row, sizeof(row),
                  "<tr><td>%s</td><td><div style=\"background:#d9622b;height:14px;width:%.1f%%\"></div></td>"
                  "<td>%.1f%%</td><td>%.3f ms</td></tr>\n",
                  ops[i].first.c_str(), share, share, ops[i].second.total / 1e6);
    bars += row;
  }
  std::string text = summary(), escaped;
  for (char c : text) escaped += c == '<' ? std::string("&lt;") : c == '&' ? std::string("&amp;") : std::string(1, c);
  std::ofstream f(path);
  KILN_CHECK(f.good(), "profiler: cannot write '", path, "'");
  f << "<!doctype html><html><head><meta charset=\"utf-8\"><title>" << title
    << "</title><style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;width:60em}"
       "td{padding:2px 8px}td:nth-child(2){width:30em}</style></head><body><h1>"
    << title << "</h1><h2>Top ops by total time</h2><table>\n"
    << bars << "</table><h2>Tables</h2><pre>" << escaped << "</pre></body></html>\n";
  KILN_CHECK(f.good(), "profiler: writing '", path, "' failed (disk full?)");
}

void write_folder(const std::string& dir, const std::string& title) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  KILN_CHECK(!ec, "profiler: cannot make the folder '", dir, "' (", ec.message(), ")");
  std::ofstream summary_file(dir + "/profile.txt");
  summary_file << summary();
  KILN_CHECK(summary_file.good(), "profiler: cannot write '", dir, "/profile.txt'");
  write_chrome_trace(dir + "/trace.json");
  write_html_report(dir + "/report.html", title);
}

}  // namespace kiln::profiler

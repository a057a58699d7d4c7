// The per-rank logs kiln launch writes, read back, filtered and merged.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <thread>

#include "kiln/error.h"
#include "kiln/launch.h"

namespace kiln::dist {

std::string format_log_line(const LogLine& l) {
  return l.time + " " + l.host + " rank " + std::to_string(l.rank) + " | " + l.text;
}

std::optional<LogLine> parse_log_line(const std::string& line) {
  // TIME HOST rank K | TEXT
  const size_t a = line.find(' ');
  if (a == std::string::npos) return std::nullopt;
  const size_t b = line.find(' ', a + 1);
  if (b == std::string::npos || line.compare(b, 6, " rank ") != 0) return std::nullopt;
  const size_t bar = line.find(" | ", b + 6);
  if (bar == std::string::npos) return std::nullopt;
  LogLine l;
  l.time = line.substr(0, a);
  l.host = line.substr(a + 1, b - a - 1);
  try {
    size_t used = 0;
    l.rank = std::stoi(line.substr(b + 6, bar - b - 6), &used);
    if (used != bar - b - 6) return std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
  l.text = line.substr(bar + 3);
  return l;
}

std::vector<std::pair<int, std::string>> log_files(const std::string& dir) {
  namespace fs = std::filesystem;
  KILN_CHECK(fs::is_directory(dir), "kiln logs: '", dir, "' is not a folder; give the --log-dir of kiln launch (default: logs)");
  const std::string folder = fs::is_directory(dir + "/logs") ? dir + "/logs" : dir;
  static const std::regex name(R"(rank-(\d+)\.log)");
  std::vector<std::pair<int, std::string>> files;
  for (const auto& entry : fs::directory_iterator(folder)) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    if (std::regex_match(file, m, name)) files.emplace_back(std::stoi(m[1]), entry.path().string());
  }
  std::sort(files.begin(), files.end());
  KILN_CHECK(!files.empty(), "kiln logs: no rank-K.log in '", folder, "'; kiln launch writes them into its --log-dir");
  return files;
}

namespace {

std::regex compile(const LogQuery& query) {
  try {
    return std::regex(query.pattern.empty() ? std::string(".") : query.pattern);
  } catch (const std::regex_error& e) {
    KILN_FAIL("kiln logs: --grep '", query.pattern, "' is not a regular expression (", e.what(), ")");
  }
}

}  // namespace

std::vector<LogLine> read_logs(const std::string& dir, const LogQuery& query) {
  const std::regex pattern = compile(query);
  std::vector<LogLine> lines;
  bool rank_seen = !query.rank.has_value();
  for (const auto& [rank, path] : log_files(dir)) {
    if (query.rank && rank != *query.rank) continue;
    rank_seen = true;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      auto parsed = parse_log_line(line);
      if (!parsed) continue;  // not written by kiln launch
      if (query.pattern.empty() || std::regex_search(parsed->text, pattern)) lines.push_back(std::move(*parsed));
    }
  }
  KILN_CHECK(rank_seen, "kiln logs: no log of rank ", *query.rank, " in '", dir, "'");
  std::stable_sort(lines.begin(), lines.end(), [](const LogLine& a, const LogLine& b) { return a.time < b.time; });
  return lines;
}

void follow_logs(const std::string& dir, const LogQuery& query, const std::function<void(const LogLine&)>& emit,
                 const std::function<bool()>& keep_going, std::chrono::milliseconds every) {
  const std::regex pattern = compile(query);
  std::map<std::string, std::streamoff> read_to;  // by file: how far complete lines were read
  while (keep_going()) {
    std::vector<LogLine> fresh;
    for (const auto& [rank, path] : log_files(dir)) {
      if (query.rank && rank != *query.rank) continue;
      std::ifstream in(path, std::ios::binary);
      in.seekg(read_to[path]);
      std::string line;
      while (std::getline(in, line)) {
        if (in.eof()) break;  // a line still being written: next time
        read_to[path] = in.tellg();
        auto parsed = parse_log_line(line);
        if (parsed && (query.pattern.empty() || std::regex_search(parsed->text, pattern))) fresh.push_back(std::move(*parsed));
      }
    }
    std::stable_sort(fresh.begin(), fresh.end(), [](const LogLine& a, const LogLine& b) { return a.time < b.time; });
    for (const auto& l : fresh) emit(l);
    std::this_thread::sleep_for(every);
  }
}

}  // namespace kiln::dist

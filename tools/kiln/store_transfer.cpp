#include "store_transfer.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "kiln/error.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

void plan_upload(Remote& remote, const std::string& src, StoreUrl to, bool mirror, TransferPlan& plan) {
  KILN_CHECK(fs::exists(src), "no such file or directory: ", src);
  if (fs::is_regular_file(src)) {
    if (to.key.empty() || to.key.back() == '/') to.key += fs::path(src).filename().string();
    plan.copies.push_back({src, to, true, static_cast<int64_t>(fs::file_size(src))});
    return;
  }
  const std::string prefix = to.key.empty() || to.key.back() == '/' ? to.key : to.key + "/";
  std::map<std::string, std::string> existing;
  for (auto& o : remote.list(to.bucket, prefix)) existing[o["key"]] = o["sha256"];
  std::set<std::string> seen;
  for (auto& entry : fs::recursive_directory_iterator(src)) {
    if (!entry.is_regular_file()) continue;
    StoreUrl each{to.bucket, prefix + fs::relative(entry.path(), src).generic_string()};
    seen.insert(each.key);
    auto it = existing.find(each.key);
    if (it != existing.end() && it->second == file_sha256(entry.path().string())) {
      ++plan.unchanged;
      continue;
    }
    plan.copies.push_back({entry.path().string(), each, true, static_cast<int64_t>(entry.file_size())});
  }
  if (mirror)
    for (auto& [key, sha] : existing)
      if (!seen.count(key)) plan.remote_removals.push_back({to.bucket, key});
}

void plan_download(Remote& remote, StoreUrl from, const std::string& dst, bool mirror, TransferPlan& plan) {
  if (!from.key.empty() && from.key.back() != '/') {
    for (auto& o : remote.list(from.bucket, from.key)) {
      if (o["key"] != from.key) continue;
      std::string local = fs::is_directory(dst) ? (fs::path(dst) / fs::path(from.key).filename()).string() : dst;
      plan.copies.push_back({local, from, false, o["size"].get<int64_t>()});
      return;
    }
    from.key += "/";
  }
  std::set<std::string> seen;
  for (auto& o : remote.list(from.bucket, from.key)) {
    std::string key = o["key"];
    std::string local = (fs::path(dst) / key.substr(from.key.size())).string();
    seen.insert(fs::path(local).lexically_normal().string());
    if (fs::exists(local) && file_sha256(local) == o["sha256"].get<std::string>()) {
      ++plan.unchanged;
      continue;
    }
    plan.copies.push_back({local, {from.bucket, key}, false, o["size"].get<int64_t>()});
  }
  KILN_CHECK(!plan.copies.empty() || plan.unchanged > 0, "nothing in the store under studio://", from.bucket, "/",
             from.key);
  std::error_code ec;
  if (mirror && fs::is_directory(dst, ec))
    for (auto& entry : fs::recursive_directory_iterator(dst))
      if (entry.is_regular_file() && !seen.count(entry.path().lexically_normal().string()))
        plan.local_removals.push_back(entry.path().string());
}

std::string megabytes(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return text;
}

}  // namespace

TransferPlan plan_transfers(Remote& remote, const std::string& src, const std::string& dst, bool mirror) {
  TransferPlan plan;
  if (!is_store_url(src) && is_store_url(dst)) plan_upload(remote, src, parse_store_url(dst), mirror, plan);
  else if (is_store_url(src) && !is_store_url(dst)) plan_download(remote, parse_store_url(src), dst, mirror, plan);
  else KILN_FAIL("copies go between a local path and a studio://BUCKET/KEY URL; got '", src, "' and '", dst, "'");
  return plan;
}

void run_transfers(const TransferPlan& plan, const std::string& server, const std::string& token, int workers,
                   const std::string& verb, const std::string& destination) {
  KILN_CHECK(workers >= 1 && workers <= 64, "--jobs takes 1 to 64 parallel transfers, not ", workers);
  int64_t total = 0;
  for (const auto& t : plan.copies) total += t.bytes;
  std::atomic<size_t> next{0}, done{0};
  std::atomic<int64_t> moved{0};
  std::mutex error_mu;
  std::string error;
  const auto start = std::chrono::steady_clock::now();
  auto work = [&] {
    try {
      Remote remote(server, token);
      for (size_t i; (i = next++) < plan.copies.size();) {
        {
          std::lock_guard<std::mutex> lock(error_mu);
          if (!error.empty()) return;
        }
        const Transfer& t = plan.copies[i];
        if (t.upload) remote.upload(t.local, t.remote);
        else remote.download(t.remote, t.local);
        moved += t.bytes;
        ++done;
      }
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (error.empty()) error = e.what();
    }
  };
  // Folders are made here, before the workers start: two workers making
  // the same parent folder at once could race.
  for (const Transfer& t : plan.copies)
    if (!t.upload && fs::path(t.local).has_parent_path()) fs::create_directories(fs::path(t.local).parent_path());
  std::vector<std::thread> pool;
  const size_t count = std::min<size_t>(static_cast<size_t>(workers), std::max<size_t>(plan.copies.size(), 1));
  for (size_t k = 0; k < count; ++k) pool.emplace_back(work);
  // A progress line on a terminal, redrawn while the workers run.
  const bool tty = ::isatty(2) && plan.copies.size() > 1;
  while (tty && done < plan.copies.size()) {
    {
      std::lock_guard<std::mutex> lock(error_mu);
      if (!error.empty()) break;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "\r%zu/%zu files  %s of %s  %.1f MB/s   ", done.load(), plan.copies.size(),
                 megabytes(moved).c_str(), megabytes(total).c_str(), s > 0 ? static_cast<double>(moved) / 1e6 / s : 0.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  for (auto& t : pool) t.join();
  if (tty) std::fprintf(stderr, "\r%*s\r", 60, "");
  KILN_CHECK(error.empty(), error, " (", done.load(), " of ", plan.copies.size(), " files were copied before it)");
  Remote remote(server, token);
  for (const auto& r : plan.remote_removals) remote.remove(r);
  for (const auto& l : plan.local_removals) fs::remove(l);
  std::printf("%s %zu file%s to %s (%d unchanged, skipped; %s", verb.c_str(), plan.copies.size(),
              plan.copies.size() == 1 ? "" : "s", destination.c_str(), plan.unchanged, megabytes(total).c_str());
  const size_t removed = plan.remote_removals.size() + plan.local_removals.size();
  if (removed) std::printf("; removed %zu the source lacks", removed);
  std::printf(")\n");
}

}  // namespace kiln::cli

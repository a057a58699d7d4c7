#include "store_shards.h"

#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>

#include "kiln/data/readers.h"
#include "kiln/data/shards.h"
#include "kiln/error.h"
#include "studio_client.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// A folder of its own under TMPDIR, removed with everything in it.
struct TempDir {
  std::string path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "kiln-pack-XXXXXX").string();
    KILN_CHECK(::mkdtemp(pattern.data()), "cannot make a temporary folder under ", fs::temp_directory_path().string());
    path = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// A member's name as a relative path that stays inside the destination.
bool safe_member(const std::string& name) {
  if (name.empty() || name[0] == '/') return false;
  for (const auto& part : fs::path(name))
    if (part == ".." || part == ".") return false;
  return true;
}

}  // namespace

int64_t parse_size(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return std::toupper(c); });
  const std::vector<std::pair<std::string, double>> units = {
      {"", 1}, {"B", 1}, {"K", 1024}, {"KB", 1024}, {"KIB", 1024}, {"M", 1 << 20}, {"MB", 1 << 20}, {"MIB", 1 << 20},
      {"G", 1 << 30}, {"GB", 1 << 30}, {"GIB", 1 << 30}};
  for (const auto& [name, scale] : units)
    if (used > 0 && unit == name && value > 0) return static_cast<int64_t>(value * scale);
  KILN_FAIL("'", text, "' is not a size; write it as 256MB, 64MiB, 1G or a number of bytes");
}

void pack_to_store(const std::string& server, const std::string& token, const std::string& src, const std::string& dst,
                   int64_t shard_bytes, int jobs, bool labels_from_folders) {
  const auto started = std::chrono::steady_clock::now();
  KILN_CHECK(fs::is_directory(src), "kiln store pack: ", src, " is not a folder");
  KILN_CHECK(is_store_url(dst), "kiln store pack: '", dst, "' is not a store URL (studio://BUCKET/PREFIX/NAME)");
  const StoreUrl base = parse_store_url(dst);
  KILN_CHECK(!base.key.empty() && base.key.back() != '/', "kiln store pack: ", dst,
             " names no shards; end it with the shards' name, as in studio://data/shards/fmnist-train");
  KILN_CHECK(jobs >= 1, "-j must be at least 1");
  // The files, grouped by sample key: a sample's fields go side by side.
  std::vector<std::tuple<std::string, std::string, std::string>> files;  // key, field, path
  for (const auto& e : fs::recursive_directory_iterator(src)) {
    if (!e.is_regular_file()) continue;
    const std::string relative = fs::relative(e.path(), src).generic_string();
    auto [key, field] = data::split_sample_name(relative);
    KILN_CHECK(!field.empty(), "kiln store pack: ", e.path().string(),
               " has no extension; a sample's files are named KEY.FIELD (00042.png, 00042.cls)");
    files.emplace_back(key, field, e.path().string());
  }
  KILN_CHECK(!files.empty(), "kiln store pack: no files under ", src);
  std::sort(files.begin(), files.end());
  // Class folders: SRC/CLASS/..., their sorted names giving the indices.
  std::vector<std::string> classes;
  if (labels_from_folders) {
    for (const auto& [key, field, path] : files) {
      KILN_CHECK(key.find('/') != std::string::npos, "kiln store pack --labels-from-folders: ", path,
                 " is not in a class folder (SRC/CLASS/FILE)");
      KILN_CHECK(field != "cls", "kiln store pack --labels-from-folders: ", path, " is a .cls file already");
      classes.push_back(key.substr(0, key.find('/')));
    }
    std::sort(classes.begin(), classes.end());
    classes.erase(std::unique(classes.begin(), classes.end()), classes.end());
  }

  TempDir temp;
  Remote remote(server, token);
  json shards = json::array();
  std::deque<std::future<void>> uploads;
  int64_t total_bytes = 0;
  const std::string name = base.key.substr(base.key.rfind('/') + 1);
  data::ShardWriter writer(temp.path + "/" + name, shard_bytes, [&](const std::string& path, int64_t samples, int64_t) {
    const std::string file = fs::path(path).filename().string();
    const int64_t size = static_cast<int64_t>(fs::file_size(path));
    shards.push_back({{"file", file}, {"samples", samples}, {"bytes", size}});
    total_bytes += size;
    // Uploads go on while the next shard is written, `jobs` at once.
    if (static_cast<int>(uploads.size()) >= jobs) {
      uploads.front().get();
      uploads.pop_front();
    }
    const std::string dir = base.key.substr(0, base.key.size() - name.size());
    uploads.push_back(std::async(std::launch::async, [=, &server, &token] {
      Remote(server, token).upload(path, {base.bucket, dir + file});
      fs::remove(path);
    }));
  });
  int64_t samples = 0;
  for (size_t i = 0; i < files.size();) {
    const std::string& key = std::get<0>(files[i]);
    std::vector<std::pair<std::string, std::string>> fields;
    size_t j = i;
    for (; j < files.size() && std::get<0>(files[j]) == key; ++j)
      fields.emplace_back(std::get<1>(files[j]), data::read_text_file(std::get<2>(files[j])));
    if (labels_from_folders) {
      const std::string folder = key.substr(0, key.find('/'));
      const size_t cls = static_cast<size_t>(std::lower_bound(classes.begin(), classes.end(), folder) - classes.begin());
      fields.emplace_back("cls", std::to_string(cls));
    }
    writer.add(key, fields);
    ++samples;
    i = j;
  }
  writer.finish();
  for (auto& u : uploads) u.get();
  // The index last: a reader that finds it finds every shard it lists.
  const std::string index = temp.path + "/index.json";
  json about = {{"format", "webdataset"}, {"samples", samples}, {"shards", shards}};
  if (labels_from_folders) about["classes"] = classes;
  std::ofstream(index) << about.dump(1) << "\n";
  remote.upload(index, {base.bucket, base.key + "-index.json"});
  std::printf("packed %lld samples (%zu files) into %zu shard%s at %s-{000000..%06zu}.tar (%.1f MB) in %.1f s\n",
              static_cast<long long>(samples), files.size(), shards.size(), shards.size() == 1 ? "" : "s",
              dst.c_str(), shards.size() - 1, static_cast<double>(total_bytes) / 1e6, seconds_since(started));
}

void unpack_from_store(const std::string& server, const std::string& token, const std::string& src,
                       const std::string& dst, int jobs) {
  const auto started = std::chrono::steady_clock::now();
  KILN_CHECK(is_store_url(src), "kiln store unpack: '", src, "' is not a store URL (studio://BUCKET/PREFIX/NAME)");
  KILN_CHECK(jobs >= 1, "-j must be at least 1");
  const StoreUrl base = parse_store_url(src);
  Remote remote(server, token);
  std::vector<std::string> keys;
  for (auto& o : remote.list(base.bucket, base.key + "-")) {
    std::string key = o["key"].get<std::string>(), rest = key.substr(base.key.size() + 1);
    if (rest.size() == 10 && rest.substr(6) == ".tar" && rest.find_first_not_of("0123456789") == 6) keys.push_back(key);
  }
  KILN_CHECK(!keys.empty(), "kiln store unpack: no shards ", src, "-NNNNNN.tar in the store (kiln store ls ",
             "studio://", base.bucket, "/", base.key.substr(0, base.key.rfind('/') + 1), " shows what is there)");
  fs::create_directories(dst);
  std::atomic<size_t> next{0};
  std::atomic<int64_t> samples{0}, files{0}, bytes{0};
  std::mutex mu;
  std::exception_ptr error;
  auto work = [&] {
    try {
      Remote mine(server, token);
      for (size_t i; (i = next++) < keys.size();) {
        const std::string url = "studio://" + base.bucket + "/" + keys[i];
        const std::string tar = mine.read({base.bucket, keys[i]});
        bytes += static_cast<int64_t>(tar.size());
        data::read_shard(tar, url, [&](data::ShardSample&& s) {
          for (const auto& [field, content] : s.fields) {
            const std::string member = s.key + "." + field;
            KILN_CHECK(safe_member(member), url, ": member '", member, "' would land outside ", dst,
                       "; refusing to unpack it");
            const fs::path path = fs::path(dst) / member;
            fs::create_directories(path.parent_path());
            std::ofstream out(path, std::ios::binary);
            out.write(content.data(), static_cast<std::streamsize>(content.size()));
            KILN_CHECK(out.good(), "cannot write ", path.string(), " (is the disk full?)");
            ++files;
          }
          ++samples;
        });
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!error) error = std::current_exception();
      next = keys.size();  // the others stop too
    }
  };
  std::vector<std::thread> workers;
  for (int w = 0; w < std::min<int>(jobs, static_cast<int>(keys.size())); ++w) workers.emplace_back(work);
  for (auto& t : workers) t.join();
  if (error) std::rethrow_exception(error);
  std::printf("unpacked %lld samples (%lld files) from %zu shard%s into %s (%.1f MB) in %.1f s\n",
              static_cast<long long>(samples.load()), static_cast<long long>(files.load()), keys.size(),
              keys.size() == 1 ? "" : "s", dst.c_str(), static_cast<double>(bytes.load()) / 1e6,
              seconds_since(started));
}

}  // namespace kiln::cli

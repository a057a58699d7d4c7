#include "studio/folder_sync.h"

#include <fstream>

#include "kiln/error.h"
#include "kiln/studio.h"

namespace kiln::studio {

namespace fs = std::filesystem;

void copy_folder_to_store(ObjectStore& store, const std::string& dir, const std::string& bucket,
                          const std::string& prefix, SyncedFiles& synced) {
  if (!fs::exists(dir)) return;
  for (auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    const std::pair<uintmax_t, fs::file_time_type> seen{entry.file_size(), entry.last_write_time()};
    auto it = synced.find(entry.path().string());
    if (it != synced.end() && it->second == seen) continue;  // a checkpoint is not read again every sync
    const std::string key = prefix + fs::relative(entry.path(), dir).generic_string();
    const std::string bytes = read_text(entry.path().string());
    auto there = store.stat(bucket, key);
    if (!there || there->sha256 != sha256_hex(bytes.data(), bytes.size())) store.put(bucket, key, bytes);
    synced[entry.path().string()] = seen;
  }
}

void copy_store_to_folder(ObjectStore& store, const std::string& bucket, const std::string& prefix,
                          const std::string& dir, const std::string& what) {
  fs::create_directories(dir);
  if (auto one = prefix.empty() ? std::nullopt : store.stat(bucket, prefix)) {
    std::ofstream(dir + "/" + fs::path(prefix).filename().string(), std::ios::binary) << store.read(bucket, *one);
    return;
  }
  const std::string under = prefix.empty() || prefix.back() == '/' ? prefix : prefix + "/";
  std::string after;
  do {
    Listing page = store.list(bucket, under, after, 1000);
    for (const auto& o : page.objects) {
      fs::path target = fs::path(dir) / o.key.substr(under.size());
      fs::create_directories(target.parent_path());
      std::ofstream out(target, std::ios::binary);
      out << store.read(bucket, o);
      KILN_CHECK(out.good(), "staging ", what, ": cannot write ", target.string(), " (is the disk full?)");
    }
    after = page.next_start_after;
  } while (!after.empty());
}

}  // namespace kiln::studio

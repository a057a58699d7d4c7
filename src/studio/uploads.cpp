#include "studio/uploads.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "kiln/studio.h"
#include "studio/tokens.h"

namespace kiln::studio {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string part_name(int n) {
  char name[32];
  std::snprintf(name, sizeof name, "part-%06d", n);
  return name;
}

}  // namespace

Uploads::Uploads(Database& db, ObjectStore& store, int keep_days) : db_(db), store_(store) {
  Statement s(db_, "SELECT bucket, id FROM uploads WHERE created_at < ?");
  s.bind(1, now_ms() - int64_t{keep_days} * 24 * 3600 * 1000);
  std::vector<std::pair<std::string, std::string>> stale;
  while (s.step()) stale.emplace_back(s.text(0), s.text(1));
  for (const auto& [bucket, id] : stale) abort(bucket, id);
}

std::string Uploads::folder(const std::string& bucket, const std::string& id) const {
  return store_.root() + "/" + bucket + "/.uploads/" + id;
}

std::string Uploads::key_of(const std::string& bucket, const std::string& id) {
  Statement s(db_, "SELECT key FROM uploads WHERE id = ? AND bucket = ?");
  s.bind(1, id).bind(2, bucket);
  if (!s.step())
    throw NotFound("no upload '" + id + "' in bucket '" + bucket + "' (completed, aborted, or never started)");
  return s.text(0);
}

std::string Uploads::create(const std::string& bucket, const std::string& key) {
  store_.require_bucket(bucket);
  check_key(key);
  static std::atomic<uint64_t> counter{0};
  const std::string seed = bucket + "/" + key + "/" + std::to_string(now_ms()) + "/" +
                           std::to_string(counter.fetch_add(1)) + "/" + std::to_string(::getpid());
  const std::string id = sha256_hex(seed.data(), seed.size()).substr(0, 32);
  fs::create_directories(folder(bucket, id));
  Statement(db_, "INSERT INTO uploads (id, bucket, key, created_at) VALUES (?, ?, ?, ?)")
      .bind(1, id).bind(2, bucket).bind(3, key).bind(4, now_ms())
      .run();
  return id;
}

json Uploads::put_part(const std::string& bucket, const std::string& id, int n, const std::string& bytes,
                       const std::string& body_file, const std::string& expected_sha256) {
  const std::string key = key_of(bucket, id);
  KILN_CHECK(n >= 1 && n <= 100000, "part numbers are 1 to 100000, not ", n);
  const bool streamed = !body_file.empty();
  const std::string sha = streamed ? sha256_file(body_file) : sha256_hex(bytes.data(), bytes.size());
  KILN_CHECK(expected_sha256.empty() || expected_sha256 == sha, "part ", n, " of the upload of '", key,
             "' arrived damaged: its SHA-256 is ", sha, ", the client sent ", expected_sha256, "; send it again");
  const std::string dir = folder(bucket, id), path = dir + "/" + part_name(n);
  const std::string partial = path + ".tmp" + std::to_string(::getpid()) + "-" + std::to_string(now_ms());
  if (streamed) {
    sync_file(body_file);
    fs::rename(body_file, partial);
  } else {
    write_synced(partial, bytes);
  }
  const auto size = static_cast<int64_t>(fs::file_size(partial));
  std::ofstream(partial + ".sha256") << sha;
  fs::rename(partial + ".sha256", path + ".sha256");
  fs::rename(partial, path);  // a part is there whole or not at all
  return {{"part", n}, {"size", size}, {"sha256", sha}};
}

json Uploads::describe(const std::string& bucket, const std::string& id) {
  const std::string key = key_of(bucket, id);
  json parts = json::array();
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(folder(bucket, id))) {
    const std::string name = e.path().filename().string();
    if (name.rfind("part-", 0) == 0 && name.size() == 11) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream sha(f.string() + ".sha256");
    std::string digest((std::istreambuf_iterator<char>(sha)), std::istreambuf_iterator<char>());
    parts.push_back({{"part", std::stoi(f.filename().string().substr(5))},
                     {"size", static_cast<int64_t>(fs::file_size(f))},
                     {"sha256", digest}});
  }
  return {{"upload_id", id}, {"bucket", bucket}, {"key", key}, {"parts", parts}};
}

ObjectInfo Uploads::complete(const std::string& bucket, const std::string& id, int parts, const std::string& sha256) {
  const std::string key = key_of(bucket, id);
  KILN_CHECK(parts >= 1, "completing an upload names its part count (\"parts\": N)");
  const std::string dir = folder(bucket, id);
  for (int n = 1; n <= parts; ++n)
    KILN_CHECK(fs::exists(dir + "/" + part_name(n)), "the upload of '", key, "' lacks part ", n, " of ", parts,
               "; send it, then complete again");
  // Join the parts into a new file, hashing as it goes.
  const std::string incoming = store_.incoming_path(bucket);
  Sha256 hash;
  int64_t size = 0;
  {
    std::ofstream out(incoming, std::ios::binary);
    KILN_CHECK(out.good(), "cannot create ", incoming);
    std::string buffer(size_t{4} << 20, '\0');
    for (int n = 1; n <= parts; ++n) {
      std::ifstream in(dir + "/" + part_name(n), std::ios::binary);
      while (in) {
        in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
        const std::streamsize got = in.gcount();
        if (got <= 0) break;
        hash.update(buffer.data(), static_cast<size_t>(got));
        out.write(buffer.data(), got);
        size += got;
      }
    }
    out.flush();
    if (!out.good()) {
      out.close();
      fs::remove(incoming);
      throw StorageFull("cannot join the parts of '" + key + "': the studio's disk is full; the upload is kept, "
                        "complete it again once there is space");
    }
  }
  int fd = ::open(incoming.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  const std::string whole = hash.hex();
  if (!sha256.empty() && sha256 != whole) {
    fs::remove(incoming);
    KILN_FAIL("the parts of '", key, "' join to SHA-256 ", whole, ", not the ", sha256,
              " the client sent; the upload is kept: send the damaged parts again and complete");
  }
  ObjectInfo info = store_.adopt(bucket, key, incoming, {key, size, whole, now_ms()});
  abort(bucket, id);
  return info;
}

void Uploads::abort(const std::string& bucket, const std::string& id) {
  key_of(bucket, id);
  Statement(db_, "DELETE FROM uploads WHERE id = ?").bind(1, id).run();
  std::error_code ec;
  fs::remove_all(folder(bucket, id), ec);
}

}  // namespace kiln::studio

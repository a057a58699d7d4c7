#include "studio/object_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "kiln/error.h"
#include "studio/tokens.h"

namespace kiln::studio {
namespace fs = std::filesystem;

void check_bucket_name(const std::string& bucket) {
  bool ok = bucket.size() >= 3 && bucket.size() <= 63 && bucket.front() != '-';
  for (char c : bucket) ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-');
  KILN_CHECK(ok, "bad bucket name '", bucket, "': use 3 to 63 characters of a-z, 0-9 and '-', not starting with '-'");
}

void check_key(const std::string& key) {
  KILN_CHECK(!key.empty() && key.size() <= 1024, "an object key has 1 to 1024 bytes, not ", key.size());
  KILN_CHECK(key.front() != '/', "bad key '", key, "': keys are relative to their bucket and may not start with '/'");
  for (unsigned char c : key)
    KILN_CHECK(c >= 0x20 && c != 0x7f && c != '\\', "bad key: control characters and '\\' are not allowed in keys");
  size_t start = 0;
  while (start <= key.size()) {
    size_t end = key.find('/', start);
    std::string segment = key.substr(start, end == std::string::npos ? std::string::npos : end - start);
    KILN_CHECK(!segment.empty() || end == std::string::npos, "bad key '", key, "': empty segment ('//')");
    KILN_CHECK(segment != "." && segment != "..", "bad key '", key, "': '.' and '..' segments are not allowed");
    if (end == std::string::npos) break;
    start = end + 1;
  }
}

ObjectStore::ObjectStore(std::string root, Database& db) : root_(std::move(root)), db_(db) {
  fs::create_directories(root_);
}

std::string ObjectStore::object_path(const std::string& bucket, const std::string& file) const {
  return root_ + "/" + bucket + "/" + file.substr(0, 2) + "/" + file;
}

void ObjectStore::require_bucket(const std::string& bucket) {
  check_bucket_name(bucket);
  Statement s(db_, "SELECT 1 FROM buckets WHERE name = ?");
  s.bind(1, bucket);
  if (!s.step()) throw NotFound("no bucket '" + bucket + "'; create it first (PUT /api/v1/buckets/" + bucket + ")");
}

void ObjectStore::create_bucket(const std::string& bucket, const std::string& project) {
  check_bucket_name(bucket);
  {
    Statement known(db_, "SELECT 1 FROM projects WHERE name = ?");
    known.bind(1, project);
    KILN_CHECK(known.step(), "no project '", project, "' (an operator makes one: kiln studio project create ", project, ")");
  }
  fs::create_directories(root_ + "/" + bucket + "/.incoming");
  Statement(db_, "INSERT INTO buckets (name, created_at, project) VALUES (?, ?, ?) ON CONFLICT DO NOTHING")
      .bind(1, bucket).bind(2, now_ms()).bind(3, project).run();
}

void ObjectStore::delete_bucket(const std::string& bucket) {
  require_bucket(bucket);
  Statement s(db_, "SELECT COUNT(*) FROM objects WHERE bucket = ?");
  s.bind(1, bucket);
  s.step();
  KILN_CHECK(s.integer(0) == 0, "bucket '", bucket, "' still holds ", s.integer(0), " objects; delete them first");
  Statement(db_, "DELETE FROM buckets WHERE name = ?").bind(1, bucket).run();
  std::error_code ec;
  fs::remove_all(root_ + "/" + bucket, ec);
}

std::vector<std::string> ObjectStore::buckets() {
  std::vector<std::string> out;
  Statement s(db_, "SELECT name FROM buckets ORDER BY name");
  while (s.step()) out.push_back(s.text(0));
  return out;
}

std::string read_text(const std::string& path, size_t from) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(from));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_synced(const std::string& path, const std::string& bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  KILN_CHECK(fd >= 0, "cannot create ", path, ": ", std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int error = errno;
      ::close(fd);
      ::unlink(path.c_str());
      if (error == ENOSPC || error == EDQUOT)
        throw StorageFull("cannot store the object: the studio's disk is full (" + std::string(std::strerror(error)) +
                          "); nothing was stored. Free space or move --data to a larger disk");
      KILN_FAIL("cannot store the object: ", std::strerror(error));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    int error = errno;
    ::close(fd);
    ::unlink(path.c_str());
    if (error == ENOSPC || error == EDQUOT)
      throw StorageFull("cannot store the object: the studio's disk is full; nothing was stored");
    KILN_FAIL("cannot store the object: fsync failed: ", std::strerror(error));
  }
  ::close(fd);
}

namespace {

void sync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

ObjectInfo ObjectStore::put(const std::string& bucket, const std::string& key, const std::string& bytes,
                            const std::string& expected_sha256) {
  require_bucket(bucket);
  check_key(key);
  ObjectInfo info{key, static_cast<int64_t>(bytes.size()), sha256_hex(bytes.data(), bytes.size()), now_ms()};
  KILN_CHECK(expected_sha256.empty() || expected_sha256 == info.sha256, "the upload of '", key,
             "' arrived damaged: its SHA-256 is ", info.sha256, ", the client sent ", expected_sha256,
             "; nothing was stored, send it again");
  const std::string incoming = incoming_path(bucket);
  write_synced(incoming, bytes);
  return adopt(bucket, key, incoming, info);
}

ObjectInfo ObjectStore::put_file(const std::string& bucket, const std::string& key, const std::string& incoming,
                                 const std::string& expected_sha256) {
  require_bucket(bucket);
  check_key(key);
  ObjectInfo info{key, static_cast<int64_t>(fs::file_size(incoming)), sha256_file(incoming), now_ms()};
  KILN_CHECK(expected_sha256.empty() || expected_sha256 == info.sha256, "the upload of '", key,
             "' arrived damaged: its SHA-256 is ", info.sha256, ", the client sent ", expected_sha256,
             "; nothing was stored, send it again");
  sync_file(incoming);
  return adopt(bucket, key, incoming, info);
}

void sync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  KILN_CHECK(fd >= 0, "cannot open ", path, ": ", std::strerror(errno));
  const int rc = ::fsync(fd), error = errno;
  ::close(fd);
  if (rc != 0 && (error == ENOSPC || error == EDQUOT))
    throw StorageFull("cannot store the object: the studio's disk is full; nothing was stored");
  KILN_CHECK(rc == 0, "cannot store the object: fsync failed: ", std::strerror(error));
}

std::string ObjectStore::incoming_path(const std::string& bucket) {
  // A new file per version: a reader of the old version keeps its file, and a
  // crash before the database knows the new one leaves the old one in place.
  static std::atomic<uint64_t> uploads{0};
  const std::string name = bucket + "/" + std::to_string(now_ms()) + "/" + std::to_string(uploads.fetch_add(1)) + "/" +
                           std::to_string(::getpid());
  return root_ + "/" + bucket + "/.incoming/" + sha256_hex(name.data(), name.size());
}

ObjectInfo ObjectStore::adopt(const std::string& bucket, const std::string& key, const std::string& incoming,
                              ObjectInfo info) {
  const std::string file = fs::path(incoming).filename().string();
  std::string final_path = object_path(bucket, file);
  fs::create_directories(fs::path(final_path).parent_path());
  if (::rename(incoming.c_str(), final_path.c_str()) != 0) {
    ::unlink(incoming.c_str());
    KILN_FAIL("cannot store the object: rename failed: ", std::strerror(errno));
  }
  sync_directory(fs::path(final_path).parent_path().string());
  std::string old_file;
  {
    Transaction t(db_);
    Statement s(db_, "SELECT file FROM objects WHERE bucket = ? AND key = ?");
    s.bind(1, bucket).bind(2, key);
    if (s.step()) old_file = s.text(0);
    Statement(db_, "INSERT INTO objects (bucket, key, size, sha256, file, modified_at) VALUES (?, ?, ?, ?, ?, ?) "
              "ON CONFLICT (bucket, key) DO UPDATE SET size = excluded.size, sha256 = excluded.sha256, "
              "file = excluded.file, modified_at = excluded.modified_at")
        .bind(1, bucket).bind(2, key).bind(3, info.size).bind(4, info.sha256).bind(5, file).bind(6, info.modified_ms)
        .run();
    t.commit();
  }
  if (!old_file.empty() && old_file != file) ::unlink(object_path(bucket, old_file).c_str());
  return info;
}

std::optional<ObjectInfo> ObjectStore::stat(const std::string& bucket, const std::string& key) {
  require_bucket(bucket);
  check_key(key);
  Statement s(db_, "SELECT size, sha256, modified_at FROM objects WHERE bucket = ? AND key = ?");
  s.bind(1, bucket).bind(2, key);
  if (!s.step()) return std::nullopt;
  ObjectInfo info{key, s.integer(0), s.text(1), s.integer(2)};
  return info;
}

std::string ObjectStore::read(const std::string& bucket, const ObjectInfo& info, int64_t offset, int64_t length) {
  Statement s(db_, "SELECT file FROM objects WHERE bucket = ? AND key = ?");
  s.bind(1, bucket).bind(2, info.key);
  if (!s.step()) throw NotFound("no object '" + info.key + "' in bucket '" + bucket + "'");
  std::ifstream in(object_path(bucket, s.text(0)), std::ios::binary);
  KILN_CHECK(in.good(), "the file of object '", info.key, "' is missing from the store; upload it again");
  if (length < 0) length = info.size - offset;
  std::string out(static_cast<size_t>(length), '\0');
  in.seekg(offset);
  in.read(out.data(), length);
  KILN_CHECK(in.gcount() == length, "the file of object '", info.key, "' is shorter than recorded; upload it again");
  return out;
}

bool ObjectStore::remove(const std::string& bucket, const std::string& key) {
  require_bucket(bucket);
  check_key(key);
  std::string file;
  {
    Transaction t(db_);
    Statement s(db_, "SELECT file FROM objects WHERE bucket = ? AND key = ?");
    s.bind(1, bucket).bind(2, key);
    if (!s.step()) return false;
    file = s.text(0);
    Statement(db_, "DELETE FROM objects WHERE bucket = ? AND key = ?").bind(1, bucket).bind(2, key).run();
    t.commit();
  }
  ::unlink(object_path(bucket, file).c_str());
  return true;
}

Listing ObjectStore::list(const std::string& bucket, const std::string& prefix, const std::string& start_after,
                          int max_keys) {
  require_bucket(bucket);
  KILN_CHECK(max_keys >= 1 && max_keys <= 10000, "max_keys is 1 to 10000, not ", max_keys);
  // Prefix and order compare bytes, whatever the keys' characters.
  const std::string key = db_.bytewise("key");
  Statement s(db_, "SELECT key, size, sha256, modified_at FROM objects WHERE bucket = ? AND substr(" +
                       db_.bytes_of("key") + ", 1, ?) = " + db_.bytes_of("?") + " AND " + key + " > ? ORDER BY " + key +
                       " LIMIT ?");
  s.bind(1, bucket).bind(2, static_cast<int64_t>(prefix.size())).bind(3, prefix).bind(4, start_after).bind(5, int64_t{max_keys} + 1);
  Listing out;
  while (s.step()) {
    if (static_cast<int>(out.objects.size()) == max_keys) {
      out.next_start_after = out.objects.back().key;
      break;
    }
    out.objects.push_back({s.text(0), s.integer(1), s.text(2), s.integer(3)});
  }
  return out;
}

}  // namespace kiln::studio

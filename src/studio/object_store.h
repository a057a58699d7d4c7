#pragma once
// The object store: buckets of keyed objects under the data directory. Each
// object's bytes are one file named by the hash of its key (so keys never
// become paths), written to a temporary file, synced and renamed into place;
// its size and SHA-256 live in the database.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "studio/database.h"

namespace kiln::studio {

// A bucket or object that does not exist (HTTP 404).
class NotFound : public Error {
 public:
  using Error::Error;
};

// The studio's disk is full (HTTP 507): nothing was stored.
class StorageFull : public Error {
 public:
  using Error::Error;
};

struct ObjectInfo {
  std::string key;
  int64_t size = 0;
  std::string sha256;
  int64_t modified_ms = 0;
};

struct Listing {
  std::vector<ObjectInfo> objects;
  std::string next_start_after;  // empty: this was the last page
};

class ObjectStore {
 public:
  ObjectStore(std::string root, Database& db);

  // In a project's name (it must exist); an existing bucket keeps its own.
  void create_bucket(const std::string& bucket, const std::string& project = "default");
  // Refuses a bucket that still holds objects.
  void delete_bucket(const std::string& bucket);
  std::vector<std::string> buckets();

  // Stores the bytes under the key (replacing what was there). With
  // expected_sha256, bytes that do not match it are refused and nothing changes.
  ObjectInfo put(const std::string& bucket, const std::string& key, const std::string& bytes,
                 const std::string& expected_sha256 = "");
  // The same from a file in the bucket's incoming folder (incoming_path),
  // which becomes the object's.
  ObjectInfo put_file(const std::string& bucket, const std::string& key, const std::string& incoming,
                      const std::string& expected_sha256 = "");
  // A fresh path in the bucket's incoming folder, and the object made of the
  // synced file written there (renamed into place; `info` as computed by the writer).
  std::string incoming_path(const std::string& bucket);
  ObjectInfo adopt(const std::string& bucket, const std::string& key, const std::string& incoming, ObjectInfo info);
  std::optional<ObjectInfo> stat(const std::string& bucket, const std::string& key);
  const std::string& root() const { return root_; }
  // Bytes [offset, offset + length) of the object (length -1: to the end).
  std::string read(const std::string& bucket, const ObjectInfo& info, int64_t offset = 0, int64_t length = -1);
  bool remove(const std::string& bucket, const std::string& key);
  // Keys starting with prefix, after start_after, in order; at most max_keys.
  Listing list(const std::string& bucket, const std::string& prefix, const std::string& start_after, int max_keys);

 private:
  std::string object_path(const std::string& bucket, const std::string& file) const;

 public:
  void require_bucket(const std::string& bucket);

 private:
  std::string root_;
  Database& db_;
};

// Writes bytes to a new file and syncs it; on a full disk throws StorageFull
// and leaves no file.
void write_synced(const std::string& path, const std::string& bytes);
// Syncs a written file to disk; StorageFull when the disk is full.
void sync_file(const std::string& path);
// A file's bytes from `from` on ("" when it cannot be read): logs, reports.
std::string read_text(const std::string& path, size_t from = 0);

// Bucket names: 3 to 63 characters of a-z, 0-9 and '-', starting with a letter or digit.
void check_bucket_name(const std::string& bucket);
// Keys: 1 to 1024 bytes of UTF-8 without control characters or backslashes;
// segments split by '/' may not be empty, "." or "..", and the key may not
// start with '/': no key can name anything outside its bucket.
void check_key(const std::string& key);

}  // namespace kiln::studio

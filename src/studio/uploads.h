#pragma once
// Uploads in parts: an object larger than one request body (or one a client
// wants to resume) is sent as numbered parts to an upload, then completed:
// the parts are joined into the object in order while its SHA-256 is
// computed, and it replaces what was at the key in one step, as a single
// upload does. Parts already received are listed, so a client that was
// interrupted sends only the rest.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "studio/database.h"
#include "studio/object_store.h"

namespace kiln::studio {

class Uploads {
 public:
  // Aborts the uploads started more than `keep_days` ago and never completed.
  Uploads(Database& db, ObjectStore& store, int keep_days = 7);
  // A new upload to bucket/key; returns its id.
  std::string create(const std::string& bucket, const std::string& key);
  // Part n (1, 2, ...): `bytes`, or the file `body_file` (in the bucket's
  // incoming folder, moved into the upload) when it is not empty; with
  // expected_sha256, damaged bytes are refused.
  nlohmann::json put_part(const std::string& bucket, const std::string& id, int n, const std::string& bytes,
                          const std::string& body_file, const std::string& expected_sha256);
  // {"key": ..., "parts": [{"part": n, "size": ..., "sha256": ...}, ...]}
  nlohmann::json describe(const std::string& bucket, const std::string& id);
  // Joins parts 1..parts into the object; with sha256, a whole that does not
  // match it is refused and the upload kept.
  ObjectInfo complete(const std::string& bucket, const std::string& id, int parts, const std::string& sha256);
  void abort(const std::string& bucket, const std::string& id);

 private:
  std::string key_of(const std::string& bucket, const std::string& id);
  std::string folder(const std::string& bucket, const std::string& id) const;
  Database& db_;
  ObjectStore& store_;
};

}  // namespace kiln::studio

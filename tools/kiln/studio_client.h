#pragma once
// The studio's HTTP client for the CLI: `kiln store` and `kiln job` talk to
// the studio named by --server / KILN_STUDIO_URL with the token of --token /
// KILN_STUDIO_TOKEN.
#include <httplib.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kiln::cli {

struct StoreUrl {
  std::string bucket, key;  // key may be a prefix, or empty
};
bool is_store_url(const std::string& s);
StoreUrl parse_store_url(const std::string& s);
std::string file_sha256(const std::string& path);

class Remote {
 public:
  // anonymous: no token (logging in).
  Remote(std::string server, std::string token, bool anonymous = false);
  const std::string& server() const { return server_; }
  const std::string& token() const { return token_; }
  nlohmann::json get_json(const std::string& path);
  std::string get_text(const std::string& path);
  nlohmann::json post_json(const std::string& path, const nlohmann::json& body, int expected);
  // Any method with a body of any type; the reply's JSON (null when it has none).
  nlohmann::json send(const std::string& method, const std::string& path, const std::string& body,
                      const std::string& content_type, int expected);
  // Every object under the prefix, following the listing's pages.
  std::vector<nlohmann::json> list(const std::string& bucket, const std::string& prefix);
  void upload(const std::string& local, const StoreUrl& dst);
  void download(const StoreUrl& src, const std::string& local);
  // An object's bytes, checked against its SHA-256.
  std::string read(const StoreUrl& src);
  // In a project (empty: the default one); an existing bucket is left as it is.
  void make_bucket(const std::string& bucket, const std::string& project = "");
  // Follows a stream of server-sent events, calling on_event(name, data)
  // for each until it returns false or the server ends the stream. A stream
  // cut short (the studio restarted, the network dropped) is opened again
  // with Last-Event-ID, so no event is lost or repeated.
  void follow_events(const std::string& path,
                     const std::function<bool(const std::string& event, const std::string& data)>& on_event);
  void remove(const StoreUrl& u);

 private:
  std::string object_path(const StoreUrl& u) const;
  // Files larger than one part (KILN_STORE_PART_MB, 64 MiB by default) go up
  // as an upload in parts, which a later run resumes.
  void upload_in_parts(const std::string& local, const StoreUrl& dst, int64_t size);
  void check(const httplib::Result& r, const char* method, const std::string& path, int expected);
  std::string server_, token_;
  std::unique_ptr<httplib::Client> client_;
};

// Percent-encodes a path segment (keeping '/' when asked) or a query value.
std::string encode(const std::string& text, bool keep_slash);

}  // namespace kiln::cli

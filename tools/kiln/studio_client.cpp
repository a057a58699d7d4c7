#include "studio_client.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "kiln/error.h"
#include "kiln/studio.h"

namespace kiln::cli {
namespace fs = std::filesystem;
using json = nlohmann::json;

bool is_store_url(const std::string& s) { return s.rfind("studio://", 0) == 0; }

StoreUrl parse_store_url(const std::string& s) {
  KILN_CHECK(is_store_url(s), "'", s, "' is not a store URL (studio://BUCKET/KEY)");
  std::string rest = s.substr(9);
  size_t slash = rest.find('/');
  StoreUrl u{rest.substr(0, slash), slash == std::string::npos ? "" : rest.substr(slash + 1)};
  KILN_CHECK(!u.bucket.empty(), "'", s, "' names no bucket; store URLs are studio://BUCKET/KEY");
  return u;
}

std::string encode(const std::string& text, bool keep_slash) {
  static const char* digits = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += digits[c >> 4];
      out += digits[c & 15];
    }
  }
  return out;
}

namespace {
std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), "cannot read ", path);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// Bytes [offset, offset + length) of a file.
std::string read_range(const std::string& path, int64_t offset, int64_t length) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), "cannot read ", path);
  in.seekg(offset);
  std::string bytes(static_cast<size_t>(length), '\0');
  in.read(bytes.data(), length);
  KILN_CHECK(in.gcount() == length, path, " changed while it was being uploaded; copy it again");
  return bytes;
}

// Files larger than this go up in parts: KILN_STORE_PART_MB, or 64 MiB.
int64_t part_bytes() {
  const char* mb = std::getenv("KILN_STORE_PART_MB");
  const double value = mb ? std::atof(mb) : 64.0;
  KILN_CHECK(value > 0, "KILN_STORE_PART_MB must be a positive number of MiB, not '", mb, "'");
  return std::max<int64_t>(1, static_cast<int64_t>(value * 1024 * 1024));
}

// Where an upload in parts remembers itself, so that a second run resumes it.
fs::path upload_state(const std::string& server, const StoreUrl& dst, const std::string& local) {
  const char* cache = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  fs::path root = cache && *cache ? fs::path(cache) : fs::path(home ? home : "/tmp") / ".cache";
  const std::string id = server + "\n" + dst.bucket + "\n" + dst.key + "\n" + fs::absolute(local).string();
  return root / "kiln" / "uploads" / (studio::sha256_hex(id.data(), id.size()) + ".json");
}

}  // namespace

std::string file_sha256(const std::string& path) { return studio::sha256_file(path); }

Remote::Remote(std::string server, std::string token, bool anonymous) {
  if (server.empty()) server = std::getenv("KILN_STUDIO_URL") ? std::getenv("KILN_STUDIO_URL") : "http://127.0.0.1:8080";
  if (token.empty() && std::getenv("KILN_STUDIO_TOKEN")) token = std::getenv("KILN_STUDIO_TOKEN");
  KILN_CHECK(anonymous || !token.empty(), "the studio needs a token: --token or KILN_STUDIO_TOKEN (`kiln studio login` "
             "or `kiln studio token create`)");
  server_ = server;
  token_ = token;
  client_ = std::make_unique<httplib::Client>(server);
  if (!anonymous) client_->set_bearer_token_auth(token);
  client_->set_url_encode(false);  // keys are percent-encoded here, once
  client_->set_connection_timeout(10);
  client_->set_read_timeout(300);
  client_->set_write_timeout(300);
}

void Remote::check(const httplib::Result& r, const char* method, const std::string& path, int expected) {
  KILN_CHECK(r, "cannot reach the studio at ", server_, " (", httplib::to_string(r.error()),
             "); is `kiln studio serve` running there? (--server or KILN_STUDIO_URL)");
  if (r->status == expected) return;
  std::string message = r->body;
  try {
    message = json::parse(r->body).value("error", r->body);
  } catch (const std::exception&) {
  }
  KILN_FAIL(method, " ", path, ": ", r->status, " ", message);
}

json Remote::get_json(const std::string& path) {
  auto r = client_->Get(path);
  check(r, "GET", path, 200);
  return json::parse(r->body);
}

void Remote::follow_events(const std::string& path,
                           const std::function<bool(const std::string& event, const std::string& data)>& on_event) {
  std::string last_id, buffer, event, data, error_body;
  bool done = false;
  int status = 0;
  // One event a blank line; fields "event:", "data:", "id:"; comments start with ':'.
  auto parse = [&](const char* bytes, size_t n) {
    buffer.append(bytes, n);
    size_t end;
    while (!done && (end = buffer.find("\n\n")) != std::string::npos) {
      std::string block = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      event = "message";
      data.clear();
      std::istringstream lines(block);
      for (std::string line; std::getline(lines, line);) {
        const size_t colon = line.find(':');
        if (colon == 0 || colon == std::string::npos) continue;
        std::string field = line.substr(0, colon), value = line.substr(colon + 1);
        if (!value.empty() && value[0] == ' ') value.erase(0, 1);
        if (field == "event") event = value;
        else if (field == "id") last_id = value;
        else if (field == "data") data += (data.empty() ? "" : "\n") + value;
      }
      if (!data.empty() && !on_event(event, data)) done = true;
    }
    return !done;
  };
  auto failing_since = std::chrono::steady_clock::now();
  client_->set_read_timeout(60);  // the server sends a comment every 15 s
  while (!done) {
    httplib::Headers headers{{"Accept", "text/event-stream"}};
    if (!last_id.empty()) headers.emplace("Last-Event-ID", last_id);
    buffer.clear();
    error_body.clear();
    auto r = client_->Get(
        path, headers,
        [&](const httplib::Response& head) {
          status = head.status;
          return true;
        },
        [&](const char* bytes, size_t n) {
          if (status != 200) {
            error_body.append(bytes, n);
            return true;
          }
          failing_since = std::chrono::steady_clock::now();
          return parse(bytes, n);
        });
    if (done) break;
    if (r && status != 200) {
      r.value().status = status;
      r.value().body = error_body;
      check(r, "GET", path, 200);
    }
    // The stream ended without its last event: open it again, for a while.
    KILN_CHECK(std::chrono::steady_clock::now() - failing_since < std::chrono::seconds(60), "lost the stream of ",
               path, " from the studio at ", server_, " and could not open it again for a minute (",
               r ? "it closed" : httplib::to_string(r.error()), ")");
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

std::string Remote::get_text(const std::string& path) {
  auto r = client_->Get(path);
  check(r, "GET", path, 200);
  return r->body;
}

json Remote::post_json(const std::string& path, const json& body, int expected) {
  auto r = client_->Post(path, body.dump(), "application/json");
  check(r, "POST", path, expected);
  return json::parse(r->body);
}

json Remote::send(const std::string& method, const std::string& path, const std::string& body,
                  const std::string& content_type, int expected) {
  httplib::Request req;
  req.method = method;
  req.path = path;
  req.body = body;
  if (!content_type.empty()) req.set_header("Content-Type", content_type);
  auto r = client_->send(req);
  check(r, method.c_str(), path, expected);
  return r->body.empty() ? json(nullptr) : json::parse(r->body);
}

std::string Remote::object_path(const StoreUrl& u) const {
  return "/api/v1/buckets/" + encode(u.bucket, false) + "/objects/" + encode(u.key, true);
}

std::vector<json> Remote::list(const std::string& bucket, const std::string& prefix) {
  std::vector<json> out;
  std::string after;
  do {
    json page = get_json("/api/v1/buckets/" + encode(bucket, false) + "/objects?prefix=" + encode(prefix, false) +
                         "&start_after=" + encode(after, false));
    for (auto& o : page["objects"]) out.push_back(o);
    after = page["next_start_after"].get<std::string>();
  } while (!after.empty());
  return out;
}

void Remote::upload(const std::string& local, const StoreUrl& dst) {
  const int64_t size = static_cast<int64_t>(fs::file_size(local));
  if (size > part_bytes()) return upload_in_parts(local, dst, size);
  std::string body = read_file(local);
  httplib::Headers headers{{"X-Kiln-Sha256", studio::sha256_hex(body.data(), body.size())}};
  auto r = client_->Put(object_path(dst), headers, body, "application/octet-stream");
  check(r, "PUT", object_path(dst), 201);
}

void Remote::upload_in_parts(const std::string& local, const StoreUrl& dst, int64_t size) {
  const int64_t part = part_bytes();
  const int parts = static_cast<int>((size + part - 1) / part);
  // The file is read once: each part is hashed alone and into the whole.
  // An upload is resumed for the same file as last time (size and time);
  // each kept part is still checked against the bytes here, and the whole
  // against the hash sent at the end.
  const int64_t modified = static_cast<int64_t>(fs::last_write_time(local).time_since_epoch().count());
  const std::string base = "/api/v1/buckets/" + encode(dst.bucket, false) + "/uploads";
  // An earlier run's upload of the same file to the same key is resumed.
  const fs::path state = upload_state(server_, dst, local);
  std::string id;
  std::map<int, std::string> have;  // part -> SHA-256, already in the store
  try {
    json saved = json::parse(read_file(state.string()));
    if (saved["modified"] == modified && saved["size"] == size && saved["part_bytes"] == part) {
      auto r = client_->Get(base + "/" + saved["upload_id"].get<std::string>());
      if (r && r->status == 200) {
        id = saved["upload_id"].get<std::string>();
        const json upload = json::parse(r->body);
        for (const auto& p : upload["parts"]) have[p["part"].get<int>()] = p["sha256"].get<std::string>();
      }
    }
  } catch (const std::exception&) {  // no state, or an upload the studio no longer has
  }
  if (id.empty()) {
    id = post_json(base, {{"key", dst.key}}, 201)["upload_id"].get<std::string>();
    fs::create_directories(state.parent_path());
    std::ofstream(state) << json({{"upload_id", id}, {"modified", modified}, {"size", size}, {"part_bytes", part}}).dump();
  }
  const char* stop_after = std::getenv("KILN_STORE_STOP_AFTER_PARTS");  // tests: an interrupted upload
  int sent = 0, kept = 0;
  studio::Sha256 whole;
  for (int n = 1; n <= parts; ++n) {
    const int64_t offset = (n - 1) * part;
    std::string bytes = read_range(local, offset, std::min(part, size - offset));
    whole.update(bytes.data(), bytes.size());
    const std::string part_sha = studio::sha256_hex(bytes.data(), bytes.size());
    if (have.count(n) && have[n] == part_sha) {
      ++kept;
      continue;
    }
    const std::string path = base + "/" + id + "/parts/" + std::to_string(n);
    check(client_->Put(path, {{"X-Kiln-Sha256", part_sha}}, bytes, "application/octet-stream"), "PUT", path, 201);
    KILN_CHECK(!stop_after || ++sent < std::atoi(stop_after), "stopped after ", sent,
               " parts (KILN_STORE_STOP_AFTER_PARTS); copy again to resume");
  }
  if (kept > 0)
    std::fprintf(stderr, "resumed the upload of %s: %d of %d parts were already in the store\n", local.c_str(), kept,
                 parts);
  post_json(base + "/" + id + "/complete", {{"parts", parts}, {"sha256", whole.hex()}}, 201);
  fs::remove(state);
}

std::string Remote::read(const StoreUrl& src) {
  auto r = client_->Get(object_path(src));
  check(r, "GET", object_path(src), 200);
  std::string expected = r->get_header_value("X-Kiln-Sha256");
  KILN_CHECK(expected.empty() || studio::sha256_hex(r->body.data(), r->body.size()) == expected, "studio://",
             src.bucket, "/", src.key, " arrived damaged (its SHA-256 differs); try again");
  return std::move(r->body);
}

void Remote::download(const StoreUrl& src, const std::string& local) {
  const std::string bytes = read(src);  // checked against the server's SHA-256
  fs::path target(local);
  if (target.has_parent_path()) fs::create_directories(target.parent_path());
  std::string tmp = local + ".part";
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    KILN_CHECK(out.good(), "cannot write ", tmp, " (is the disk full?)");
  }
  fs::rename(tmp, local);  // complete or not there at all
}

void Remote::make_bucket(const std::string& bucket, const std::string& project) {
  std::string path = "/api/v1/buckets/" + encode(bucket, false) + (project.empty() ? "" : "?project=" + encode(project, false));
  auto r = client_->Put(path, "", "text/plain");
  check(r, "PUT", path, 201);
}

void Remote::remove(const StoreUrl& u) {
  auto r = client_->Delete(object_path(u));
  check(r, "DELETE", object_path(u), 204);
}

}  // namespace kiln::cli

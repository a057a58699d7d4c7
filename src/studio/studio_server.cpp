// The studio's HTTP API (/api/v1) over the serve layer's transport: tokens
// checked on every endpoint but health, writes recorded in the audit log.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <nlohmann/json.hpp>

#include "kiln/studio.h"
#include "serve/http_server.h"
#include "studio/access.h"
#include "studio/job_routes.h"
#include "studio/model_routes.h"
#include "studio/notebooks.h"
#include "studio/project_routes.h"
#include "studio/service_routes.h"
#include "studio/object_store.h"
#include "studio/projects.h"
#include "studio/tokens.h"
#include "studio/console_files.h"
#include "studio/uploads.h"

namespace kiln::studio {
namespace {

using serve::HttpRequest;
using serve::HttpResponse;
using json = nlohmann::json;

// StudioOptions::database as Database::open takes it.
std::string database_location(const std::string& data_dir, const std::string& database) {
  return database.empty() ? data_dir + "/studio.db" : database;
}

json object_json(const ObjectInfo& o) {
  return {{"key", o.key}, {"size", o.size}, {"sha256", o.sha256}, {"modified_ms", o.modified_ms}};
}

// "bytes=a-b", "bytes=a-" or "bytes=-n" against an object of `size` bytes.
bool parse_range(const std::string& header, int64_t size, int64_t& offset, int64_t& length) {
  if (header.rfind("bytes=", 0) != 0 || header.find(',') != std::string::npos) return false;
  std::string spec = header.substr(6);
  size_t dash = spec.find('-');
  if (dash == std::string::npos) return false;
  try {
    std::string a = spec.substr(0, dash), b = spec.substr(dash + 1);
    if (a.empty()) {
      int64_t n = std::stoll(b);
      offset = std::max<int64_t>(0, size - n);
      length = size - offset;
    } else {
      offset = std::stoll(a);
      int64_t last = b.empty() ? size - 1 : std::min<int64_t>(std::stoll(b), size - 1);
      length = last - offset + 1;
    }
  } catch (const std::exception&) {
    return false;
  }
  return offset >= 0 && offset < size && length > 0;
}

// Whether the path goes to a notebook's Jupyter server (or opens it in a browser).
bool notebook_proxy_path(const std::string& path) {
  if (path.rfind("/api/v1/notebooks/", 0) != 0) return false;
  const size_t slash = path.find('/', std::string("/api/v1/notebooks/").size());
  return slash != std::string::npos && (path.compare(slash, 7, "/proxy/") == 0 || path.compare(slash, 6, "/open") == 0);
}

// The scope a request asks of a token: read for GET, write otherwise.
// Inference through a service is a read, and is not audited (it writes
// nothing); the instances' repository routes change what serves: admin.
// A notebook runs code: write. The audit log, the tokens, and a project's
// members and secrets: admin.
Scope needed_scope(const HttpRequest& req) {
  Scope needed = req.method == "GET" || req.method == "HEAD" ? Scope::Read : Scope::Write;
  if (notebook_proxy_path(req.path)) needed = Scope::Write;
  if (is_service_proxy_path(req.path))
    if (const std::optional<ProxyAccess> forwarded = proxy_access(req.method, req.path)) needed = forwarded->needed;
  if (req.path.rfind("/api/v1/audit", 0) == 0 || req.path.rfind("/api/v1/tokens", 0) == 0) needed = Scope::Admin;
  if (req.path.rfind("/api/v1/projects/", 0) == 0 &&
      (needed == Scope::Write || req.path.find("/secrets") != std::string::npos))
    needed = Scope::Admin;
  return needed;
}

}  // namespace

// The data directory's lock (flock on DATA/studio.lock), held while the
// studio lives: declared first in Impl, so released last.
struct DirectoryLock {
  int fd = -1;
  ~DirectoryLock() {
    if (fd >= 0) ::close(fd);
  }
};

struct StudioServer::Impl {
  DirectoryLock lock;
  StudioOptions options;
  std::unique_ptr<Database> db;
  std::unique_ptr<ObjectStore> store;
  std::unique_ptr<Jobs> jobs;
  std::unique_ptr<Runs> runs;
  std::unique_ptr<Uploads> uploads;
  std::unique_ptr<Models> models;
  std::unique_ptr<Services> services;
  std::unique_ptr<Notebooks> notebooks;  // before http: its tunnels end with the server's workers
  std::unique_ptr<serve::HttpServer> http;
  std::FILE* access_log = nullptr;
  std::mutex log_mu;
  // Tokens seen in the last second, by secret: a request skips the database.
  // A revocation by this process (a job's token) takes effect at once, one
  // by another (kiln studio token revoke) within the second.
  struct CachedToken {
    std::optional<TokenInfo> token;
    std::chrono::steady_clock::time_point until;
    uint64_t revocations = 0;  // token_revocations() when cached
  };
  std::mutex token_mu;
  std::unordered_map<std::string, CachedToken> token_cache;
  // Failed logins by client address in the current minute: past 10, the
  // address is refused until the minute is over (each check costs 0.15 s of
  // CPU, and guessing passwords should cost more than that).
  struct Failures {
    int count = 0;
    std::chrono::steady_clock::time_point since;
  };
  std::mutex login_mu;
  std::unordered_map<std::string, Failures> login_failures;
  std::optional<TokenInfo> lookup_token(const std::string& secret);

  // The token of a request to the API, when it may go on; otherwise res has
  // the answer (401, 403 or 404). audited: whether it goes in the audit log.
  std::optional<TokenInfo> admit(const HttpRequest& req, HttpResponse& res, bool& audited);
  // HttpOptions::check_head: tokens and scopes judged before a body is read.
  bool check_head(HttpRequest& head, HttpResponse& res);
  // For a user's token: whether its user's role lets the request go on in
  // the project it acts in (access.h); otherwise res has the 403. In the
  // head, a creation whose project its body names is judged later. `judged`,
  // when given, gets what the request was judged to act on.
  bool authorize(const HttpRequest& req, HttpResponse& res, const TokenInfo& token, bool head,
                 RequestTarget* judged = nullptr);
  // POST /api/v1/login: a user's name and password for a token of the user's.
  void login(const HttpRequest& req, HttpResponse& res);
  void handle(const HttpRequest& req, HttpResponse& res);
  void route(const HttpRequest& req, HttpResponse& res, const TokenInfo& token);
  void objects(const HttpRequest& req, HttpResponse& res, const std::string& bucket, const std::string& key);
  void upload_parts(const HttpRequest& req, HttpResponse& res, const std::vector<std::string>& parts);
  void audit(const HttpRequest& req, const HttpResponse& res, const std::string& token_name, const std::string& user = "");
  void log(const HttpRequest& req, const HttpResponse& res, double seconds);
};

std::optional<TokenInfo> StudioServer::Impl::lookup_token(const std::string& secret) {
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(token_mu);
    auto it = token_cache.find(secret);
    if (it != token_cache.end() && it->second.until > now && it->second.revocations == token_revocations())
      return it->second.token;
  }
  const uint64_t revoked_so_far = token_revocations();
  std::optional<TokenInfo> token = find_token(*db, secret);
  std::lock_guard<std::mutex> lock(token_mu);
  if (token_cache.size() > 10000) token_cache.clear();  // bounded: unknown secrets are cached too
  token_cache[secret] = {token, now + std::chrono::seconds(1), revoked_so_far};
  return token;
}

std::optional<TokenInfo> StudioServer::Impl::admit(const HttpRequest& req, HttpResponse& res, bool& audited) {
  audited = false;
  if (req.path.rfind("/api/v1/", 0) != 0) {
    serve::set_error(res, 404, "no such endpoint: " + serve::printable(req.path) + "; the API is under /api/v1");
    return std::nullopt;
  }
  const std::string* auth = req.header("Authorization");
  std::optional<TokenInfo> token;
  if (auth && auth->rfind("Bearer ", 0) == 0) token = lookup_token(auth->substr(7));
  bool presented = auth != nullptr;
  // A browser in a notebook sends no header: its token came as ?token= to
  // .../open, which set it as a cookie for that notebook's paths.
  if (!auth && req.path.rfind("/api/v1/notebooks/", 0) == 0) {
    std::optional<std::string> secret;
    if (req.path.size() > 5 && req.path.compare(req.path.size() - 5, 5, "/open") == 0) {
      secret = serve::query_param(req.query, "token");
    } else if (const std::string* cookies = req.header("Cookie")) {
      const size_t at = cookies->find("kiln_token=");
      if (at != std::string::npos) secret = cookies->substr(at + 11, cookies->find(';', at) - at - 11);
    }
    if (secret) token = lookup_token(*secret), presented = true;
  }
  if (!token) {
    serve::set_error(res, 401, presented ? "the token is unknown or revoked; create one with `kiln studio token create`"
                                    : "every endpoint but /api/v1/health needs \"Authorization: Bearer <token>\" "
                                      "(`kiln studio token create --scope read|write|admin`)");
    res.headers.emplace_back("WWW-Authenticate", "Bearer");
    return std::nullopt;
  }
  if (token->expired(now_ms())) {
    serve::set_error(res, 401, "token '" + token->name + "' expired at " + utc_time(token->expires_at) +
                                   "; rotate it (`kiln studio token rotate --name " + token->name +
                                   "`) or create a new one");
    res.headers.emplace_back("WWW-Authenticate", "Bearer error=\"invalid_token\"");
    return std::nullopt;
  }
  const bool proxy = is_service_proxy_path(req.path);
  const std::optional<ProxyAccess> forwarded = proxy ? proxy_access(req.method, req.path) : std::nullopt;
  const Scope needed = needed_scope(req);
  audited = proxy ? forwarded && forwarded->audited : req.method != "GET" && req.method != "HEAD";
  if (notebook_proxy_path(req.path)) audited = false;  // a notebook's own traffic (saves, kernels): not the studio's writes
  if (proxy && !forwarded) {
    serve::set_error(res, 404, "the service proxy forwards inference and metadata only (GET .../v2/models/M, "
                               "POST .../v2/models/M/infer); " + req.method + " " + serve::printable(req.path) +
                               " is not one of them");
    audited = false;
    return std::nullopt;
  }
  if (static_cast<int>(token->scope) < static_cast<int>(needed)) {
    serve::set_error(res, 403, "token '" + token->name + "' has scope " + scope_name(token->scope) + "; " + req.method +
                                   " " + serve::printable(req.path) + " needs " + scope_name(needed));
    if (audited) audit(req, res, token->name, token->user);  // a refused write is on record too
    return std::nullopt;
  }
  return token;
}

bool StudioServer::Impl::authorize(const HttpRequest& req, HttpResponse& res, const TokenInfo& token, bool head,
                                   RequestTarget* judged) {
  if (token.user.empty()) return true;
  const Scope needed = needed_scope(req);
  const bool creation_in_body = req.method == "POST" && (req.path == "/api/v1/jobs" || req.path == "/api/v1/services");
  if (head && creation_in_body) return true;
  RequestTarget target;
  try {
    target = request_target(*db, req, needed);
  } catch (const Error& e) {  // a bad project name
    serve::set_error(res, 400, e.what());
    return false;
  }
  if (judged) *judged = target;
  if (target.kind == RequestTarget::StudioOnly) {
    serve::set_error(res, 403, "token '" + token.name + "' is user " + token.user + "'s; " + req.method + " " +
                                   serve::printable(req.path) + " needs a studio-wide token (`kiln studio token create`)");
    return false;
  }
  if (target.kind != RequestTarget::InProject) return true;
  // A creation in a project that is not there: the route says so.
  if (!project_exists(*db, target.project)) return true;
  std::vector<Reference> needs = {{target.project, req.method + " " + serve::printable(req.path), target.role}};
  if (!head)
    for (auto& r : request_references(*db, req)) needs.push_back(std::move(r));
  for (const Reference& need : needs) {
    const Role role = role_of(*db, token.user, need.project);
    if (static_cast<int>(role) >= static_cast<int>(need.role)) continue;
    serve::set_error(res, 403, "user " + token.user +
                                   (role == Role::None ? " has no role" : " is a " + std::string(role_name(role))) +
                                   " in project '" + need.project + "'; " + need.what + " needs " + role_name(need.role) +
                                   " there (a project admin grants it: kiln project grant " + need.project + " " +
                                   token.user + " " + role_name(need.role) + ")");
    return false;
  }
  return true;
}

bool StudioServer::Impl::check_head(HttpRequest& head, HttpResponse& res) {
  if (head.path == "/api/v1/login") {  // no token: a body no larger than a name and a password
    const std::string* length = head.header("Content-Length");
    if (length && (length->size() > 6 || std::stol("0" + *length) > 64 * 1024)) {
      serve::set_error(res, 413, "a login is a name and a password, at most 64 KiB");
      return false;
    }
    return true;
  }
  if (head.path == "/api/v1/health" || (head.path.rfind("/api/", 0) != 0 && head.path != "/api")) return true;
  bool audited = false;
  const std::optional<TokenInfo> token = admit(head, res, audited);
  if (!token) return false;
  if (!authorize(head, res, *token, true)) {
    if (audited) audit(head, res, token->name, token->user);
    return false;
  }
  // An object or a part goes to a file in its bucket, not into memory.
  const std::vector<std::string> parts = split_path(head.path);
  const bool object = parts.size() >= 6 && parts[4] == "objects";
  const bool part = parts.size() == 8 && parts[4] == "uploads" && parts[6] == "parts";
  if (head.method == "PUT" && parts[2] == "buckets" && (object || part)) {
    try {
      store->require_bucket(parts[3]);
      head.body_file = store->incoming_path(parts[3]);
    } catch (const std::exception&) {  // no such bucket: the route says so
    }
  }
  return true;
}

void StudioServer::Impl::handle(const HttpRequest& req, HttpResponse& res) {
  if (req.path == "/api/v1/health") {
    reply_json(res, 200, {{"status", "ok"}, {"version", KILN_VERSION}});
    return;
  }
  if (req.path.rfind("/api/", 0) != 0 && req.path != "/api") {
    serve_console(options.console_dir, req, res);  // the web console: files anyone may load; its data needs a token
    return;
  }
  if (req.path == "/api/v1/login") {
    login(req, res);
    return;
  }
  bool audited = false;
  std::optional<TokenInfo> token = admit(req, res, audited);
  if (!token) return;
  try {
    RequestTarget target;
    if (authorize(req, res, *token, false, &target)) {
      route(req, res, *token);
      if (!token->user.empty() && target.kind == RequestTarget::List)
        keep_users_items(*db, res, target.what, token->user);
    }
  } catch (const NotFound& e) {
    serve::set_error(res, 404, e.what());
  } catch (const Conflict& e) {
    serve::set_error(res, 409, e.what());
  } catch (const StorageFull& e) {
    serve::set_error(res, 507, e.what());
  } catch (const Error& e) {
    serve::set_error(res, 400, e.what());
  }
  if (audited) audit(req, res, token->name, token->user);
}

void StudioServer::Impl::login(const HttpRequest& req, HttpResponse& res) {
  if (req.method != "POST") {
    serve::set_error(res, 405, "log in with POST /api/v1/login {\"user\": ..., \"password\": ...}");
    return;
  }
  const json body = json::parse(req.body, nullptr, false);
  if (!body.is_object() || !body.contains("user") || !body["user"].is_string() || !body.contains("password") ||
      !body["password"].is_string()) {
    serve::set_error(res, 400, "log in with {\"user\": NAME, \"password\": ..., \"expires\": \"12h\"}");
    return;
  }
  const std::string user = body["user"];
  constexpr int kMaxFailures = 10;
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(login_mu);
    Failures& f = login_failures[req.remote_addr];
    if (now - f.since > std::chrono::minutes(1)) f = {0, now};
    if (f.count >= kMaxFailures) {
      const auto wait = std::chrono::duration_cast<std::chrono::seconds>(f.since + std::chrono::minutes(1) - now).count() + 1;
      serve::set_error(res, 429, std::to_string(kMaxFailures) + " failed logins from this address in a minute; try again in " +
                                     std::to_string(wait) + " s");
      res.headers.emplace_back("Retry-After", std::to_string(wait));
      return;
    }
    if (login_failures.size() > 100000) login_failures.clear();  // bounded: addresses are cheap to come by
  }
  int64_t expires_ms = 12 * 3600 * 1000LL;
  try {
    if (body.contains("expires")) {
      KILN_CHECK(body["expires"].is_string() && body["expires"] != "never",
                 "\"expires\" is a duration such as 12h or 30d (a login's token always expires)");
      expires_ms = parse_duration_ms(body["expires"]);
    }
  } catch (const Error& e) {
    serve::set_error(res, 400, e.what());
    return;
  }
  if (!check_password(*db, user, body["password"].get<std::string>())) {
    {
      std::lock_guard<std::mutex> lock(login_mu);
      ++login_failures[req.remote_addr].count;
    }
    serve::set_error(res, 401, "wrong user name or password");
    audit(req, res, "(login)", user.size() <= 64 ? user : user.substr(0, 64));
    return;
  }
  const int64_t expires_at = now_ms() + expires_ms;
  // A login's token may do what the user's roles allow: scope admin, held back by the roles.
  const std::string token = create_token(*db, "login:" + user, Scope::Admin, expires_at, user);
  reply_json(res, 200, {{"token", token}, {"user", user}, {"expires_ms", expires_at}});
  audit(req, res, "login:" + user, user);
}

void StudioServer::Impl::route(const HttpRequest& req, HttpResponse& res, const TokenInfo& token) {
  std::vector<std::string> parts = split_path(req.path);  // "api", "v1", ...
  const std::string what = parts.size() > 2 ? parts[2] : "";
  if (what == "buckets" && parts.size() == 3 && req.method == "GET") {
    reply_json(res, 200, {{"buckets", store->buckets()}});
  } else if (what == "buckets" && parts.size() == 4 && req.method == "PUT") {
    store->create_bucket(parts[3], requested_project(req));
    reply_json(res, 201, {{"bucket", parts[3]}});
  } else if (what == "buckets" && parts.size() == 4 && req.method == "DELETE") {
    store->delete_bucket(parts[3]);
    res.status = 204;
  } else if (what == "buckets" && parts.size() >= 5 && parts[4] == "objects") {
    // The key is the rest of the path, slashes included.
    size_t at = std::string("/api/v1/buckets/").size() + parts[3].size() + std::string("/objects").size();
    std::string key = req.path.size() > at + 1 ? req.path.substr(at + 1) : "";
    objects(req, res, parts[3], key);
  } else if (what == "buckets" && parts.size() >= 5 && parts[4] == "uploads") {
    upload_parts(req, res, parts);
  } else if (what == "jobs") {
    handle_jobs(*jobs, *runs, req, res, parts, token.name);
  } else if (what == "models") {
    handle_models(*models, req, res, parts, token.name);
  } else if (what == "services") {
    handle_services(*services, req, res, parts);
  } else if (what == "whoami" && parts.size() == 3 && req.method == "GET") {
    json me = {{"name", token.name}, {"scope", scope_name(token.scope)}};
    if (!token.user.empty()) {
      me["user"] = token.user;
      json roles = json::object();
      for (const auto& p : list_projects(*db, token.user))
        for (const auto& m : p.members)
          if (m.user == token.user) roles[p.name] = role_name(m.role);
      me["projects"] = roles;
    }
    reply_json(res, 200, me);
  } else if (what == "projects") {
    handle_projects(*db, *jobs, req, res, parts, token.user);
  } else if (what == "notebooks") {
    handle_notebooks(*notebooks, req, res, parts, token.user);
  } else if (what == "audit" && req.method == "GET") {
    int64_t limit = 100;
    if (auto text = serve::query_param(req.query, "limit")) {
      try {
        limit = std::stoll(*text);
      } catch (const std::exception&) {
        KILN_FAIL("limit must be a number, not '", *text, "'");
      }
      KILN_CHECK(limit >= 1 && limit <= 10000, "limit must be from 1 to 10000, not ", limit);
    }
    Statement s(*db, "SELECT at, token_name, method, path, status, remote, user_name FROM audit_log "
                     "ORDER BY id DESC LIMIT ?");
    s.bind(1, limit);
    json entries = json::array();
    while (s.step())
      entries.push_back({{"at_ms", s.integer(0)}, {"token", s.text(1)}, {"method", s.text(2)}, {"path", s.text(3)},
                         {"status", s.integer(4)}, {"remote", s.text(5)},
                         {"user", s.is_null(6) ? json(nullptr) : json(s.text(6))}});
    reply_json(res, 200, {{"entries", entries}});
  } else if (what == "tokens" && parts.size() == 3 && req.method == "GET") {
    json tokens = json::array();
    const int64_t now = now_ms();
    for (const TokenListing& t : list_tokens(*db))
      tokens.push_back({{"name", t.name}, {"scope", scope_name(t.scope)}, {"created_ms", t.created_ms},
                        {"expires_ms", t.expires_ms > 0 ? json(t.expires_ms) : json(nullptr)},
                        {"revoked", t.revoked_ms > 0}, {"state", t.state(now)},
                        {"user", t.user.empty() ? json(nullptr) : json(t.user)}});
    reply_json(res, 200, {{"tokens", tokens}});
  } else {
    serve::set_error(res, 404, "no endpoint " + req.method + " " + serve::printable(req.path) + " (see docs/studio.md)");
  }
}

void StudioServer::Impl::objects(const HttpRequest& req, HttpResponse& res, const std::string& bucket,
                                 const std::string& key) {
  if (key.empty()) {
    KILN_CHECK(req.method == "GET", req.method, " needs an object key: /api/v1/buckets/", bucket, "/objects/KEY");
    int max_keys = 1000;
    if (auto m = serve::query_param(req.query, "max_keys")) {
      try {
        max_keys = std::stoi(*m);
      } catch (const std::exception&) {
        KILN_FAIL("max_keys must be a number, not '", *m, "'");
      }
    }
    Listing page = store->list(bucket, serve::query_param(req.query, "prefix").value_or(""),
                               serve::query_param(req.query, "start_after").value_or(""), max_keys);
    json objects = json::array();
    for (const auto& o : page.objects) objects.push_back(object_json(o));
    reply_json(res, 200, {{"objects", objects}, {"next_start_after", page.next_start_after}});
    return;
  }
  if (req.method == "PUT") {
    const std::string* sha = req.header("X-Kiln-Sha256");
    reply_json(res, 201, object_json(req.body_file.empty() ? store->put(bucket, key, req.body, sha ? *sha : "")
                                                           : store->put_file(bucket, key, req.body_file, sha ? *sha : "")));
  } else if (req.method == "DELETE") {
    if (!store->remove(bucket, key)) throw NotFound("no object '" + key + "' in bucket '" + bucket + "'");
    res.status = 204;
  } else if (req.method == "GET") {
    auto info = store->stat(bucket, key);
    if (!info) throw NotFound("no object '" + key + "' in bucket '" + bucket + "'");
    if (serve::query_param(req.query, "stat")) {
      reply_json(res, 200, object_json(*info));
      return;
    }
    res.headers.emplace_back("X-Kiln-Sha256", info->sha256);
    res.headers.emplace_back("ETag", "\"" + info->sha256 + "\"");
    res.headers.emplace_back("Accept-Ranges", "bytes");
    res.content_type = "application/octet-stream";
    const std::string* range = req.header("Range");
    int64_t offset = 0, length = info->size;
    if (range) {
      if (!parse_range(*range, info->size, offset, length)) {
        serve::set_error(res, 416, "unsatisfiable range '" + serve::printable(*range) + "' for an object of " +
                                       std::to_string(info->size) + " bytes");
        res.headers.emplace_back("Content-Range", "bytes */" + std::to_string(info->size));
        return;
      }
      res.status = 206;
      res.headers.emplace_back("Content-Range", "bytes " + std::to_string(offset) + "-" +
                                                    std::to_string(offset + length - 1) + "/" + std::to_string(info->size));
    }
    res.body = store->read(bucket, *info, offset, length);
  } else {
    serve::set_error(res, 405, req.method + " is not allowed on objects (GET, PUT, DELETE)");
  }
}

// POST   /api/v1/buckets/B/uploads                 {"key": K} -> {"upload_id"}
// GET    /api/v1/buckets/B/uploads/ID              the parts received
// PUT    /api/v1/buckets/B/uploads/ID/parts/N      a part (X-Kiln-Sha256 checked)
// POST   /api/v1/buckets/B/uploads/ID/complete     {"parts": N, "sha256": S} -> the object
// DELETE /api/v1/buckets/B/uploads/ID
void StudioServer::Impl::upload_parts(const HttpRequest& req, HttpResponse& res, const std::vector<std::string>& parts) {
  const std::string& bucket = parts[3];
  const size_t n = parts.size();
  if (n == 5 && req.method == "POST") {
    json body = parse_json_body(req);
    KILN_CHECK(body.is_object() && body.contains("key") && body["key"].is_string(), "an upload is started with {\"key\": KEY}");
    reply_json(res, 201, {{"upload_id", uploads->create(bucket, body["key"])}});
  } else if (n == 6 && req.method == "GET") {
    reply_json(res, 200, uploads->describe(bucket, parts[5]));
  } else if (n == 6 && req.method == "DELETE") {
    uploads->abort(bucket, parts[5]);
    res.status = 204;
  } else if (n == 8 && parts[6] == "parts" && req.method == "PUT") {
    int part = 0;
    try {
      part = std::stoi(parts[7]);
    } catch (const std::exception&) {
      KILN_FAIL("'", parts[7], "' is not a part number");
    }
    const std::string* sha = req.header("X-Kiln-Sha256");
    reply_json(res, 201, uploads->put_part(bucket, parts[5], part, req.body, req.body_file, sha ? *sha : ""));
  } else if (n == 7 && parts[6] == "complete" && req.method == "POST") {
    json body = parse_json_body(req);
    KILN_CHECK(body.is_object() && body.contains("parts") && body["parts"].is_number_integer(),
               "an upload is completed with {\"parts\": N, \"sha256\": \"...\"}");
    reply_json(res, 201, object_json(uploads->complete(bucket, parts[5], body["parts"], body.value("sha256", ""))));
  } else {
    serve::set_error(res, 404, "no endpoint " + req.method + " " + serve::printable(req.path) +
                                   " (uploads in parts: see docs/studio.md)");
  }
}

void StudioServer::Impl::audit(const HttpRequest& req, const HttpResponse& res, const std::string& token_name,
                               const std::string& user) {
  try {
    Statement insert(*db, "INSERT INTO audit_log (at, token_name, method, path, status, remote, user_name) "
                          "VALUES (?, ?, ?, ?, ?, ?, ?)");
    insert.bind(1, now_ms()).bind(2, token_name).bind(3, req.method).bind(4, serve::printable(req.path))
        .bind(5, int64_t{res.status}).bind(6, req.remote_addr);
    if (user.empty()) insert.bind_null(7);
    else insert.bind(7, user);
    insert.run();
  } catch (const Error& e) {
    std::fprintf(stderr, "kiln studio: could not write the audit log: %s\n", e.what());
  }
}

void StudioServer::Impl::log(const HttpRequest& req, const HttpResponse& res, double seconds) {
  if (!access_log) return;
  const std::string when = utc_time(now_ms());
  std::lock_guard<std::mutex> lock(log_mu);
  std::fprintf(access_log, "%s %s %s %s %d %zu %.3fms\n", when.c_str(), req.remote_addr.c_str(),
               serve::log_field(req.method).c_str(), serve::log_field(req.path).c_str(), res.status, res.body.size(),
               seconds * 1e3);
  std::fflush(access_log);
}

StudioServer::StudioServer(StudioOptions options) : impl_(std::make_unique<Impl>()) {
  namespace fs = std::filesystem;
  impl_->options = std::move(options);
  if (impl_->options.console_dir.empty()) {
    // An installed kiln's console (PREFIX/share/kiln/console), else the one this build made.
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    const fs::path installed = exe.parent_path().parent_path() / "share/kiln/console";
    if (!ec && fs::exists(installed / "index.html")) impl_->options.console_dir = installed.string();
#ifdef KILN_CONSOLE_DIR
    else impl_->options.console_dir = KILN_CONSOLE_DIR;
#endif
  }
  std::error_code ec;
  fs::create_directories(impl_->options.data_dir, ec);
  KILN_CHECK(!ec, "kiln studio: cannot create the data directory ", impl_->options.data_dir, ": ", ec.message());
  // Absolute: jobs run in folders of their own and must still find it.
  const std::string dir = fs::absolute(impl_->options.data_dir).lexically_normal().string();
  // One studio process per data directory and per database: two would each
  // take the other's running jobs for its own dead ones.
  impl_->lock.fd = ::open((dir + "/studio.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  KILN_CHECK(impl_->lock.fd >= 0, "kiln studio: cannot open ", dir, "/studio.lock: ", std::strerror(errno));
  if (::flock(impl_->lock.fd, LOCK_EX | LOCK_NB) != 0) {
    const std::string holder = read_text(dir + "/studio.lock");
    ::close(impl_->lock.fd);
    impl_->lock.fd = -1;
    KILN_FAIL("kiln studio: another studio serves the data directory ", dir,
              holder.empty() ? std::string() : " (pid " + holder.substr(0, holder.find('\n')) + ")",
              "; stop it first, or give this one another --data");
  }
  if (::ftruncate(impl_->lock.fd, 0) == 0) {
    const std::string pid = std::to_string(::getpid()) + "\n";
    ssize_t ignored = ::write(impl_->lock.fd, pid.data(), pid.size());
    (void)ignored;
  }
  impl_->db = Database::open(database_location(dir, impl_->options.database));
  KILN_CHECK(impl_->db->claim(), "kiln studio: another studio uses the database ", impl_->db->location(),
             "; one studio process serves a database (stop the other, or give this one its own --db)");
  impl_->store = std::make_unique<ObjectStore>(dir + "/objects", *impl_->db);
  std::string kiln = impl_->options.kiln_executable;
  if (kiln.empty()) kiln = fs::read_symlink("/proc/self/exe").string();
  impl_->jobs = std::make_unique<Jobs>(dir + "/jobs", *impl_->db, *impl_->store, kiln, impl_->options.executor,
                                       impl_->options.slurm_partition,
                                       Capacity{impl_->options.cpus, impl_->options.memory_mb, impl_->options.gpus},
                                       impl_->options.sandbox, dir);
  impl_->runs = std::make_unique<Runs>(*impl_->db);
  impl_->uploads = std::make_unique<Uploads>(*impl_->db, *impl_->store);
  impl_->models = std::make_unique<Models>(*impl_->db, *impl_->store, *impl_->jobs, *impl_->runs, kiln, dir + "/work");
  impl_->services = std::make_unique<Services>(*impl_->db, *impl_->models, kiln, dir + "/services");
  impl_->notebooks = std::make_unique<Notebooks>(*impl_->db, *impl_->store, dir + "/notebooks", kiln,
                                                 impl_->jobs->sandbox(), dir);
  if (impl_->options.access_log == "-") {
    impl_->access_log = stderr;
  } else if (!impl_->options.access_log.empty()) {
    impl_->access_log = std::fopen(impl_->options.access_log.c_str(), "a");
    KILN_CHECK(impl_->access_log, "kiln studio: cannot open the access log '", impl_->options.access_log, "'");
  }
}

int StudioServer::start() {
  serve::HttpOptions o;
  o.host = impl_->options.host;
  o.port = impl_->options.port;
  o.max_body_bytes = impl_->options.max_upload_bytes;
  o.body_limit_hint = "kiln studio serve --max-upload-mb raises it";
  Impl* impl = impl_.get();
  o.check_head = [impl](HttpRequest& head, HttpResponse& res) { return impl->check_head(head, res); };
  impl_->http = std::make_unique<serve::HttpServer>(
      o, [impl](const HttpRequest& req, HttpResponse& res) { impl->handle(req, res); },
      [impl](const HttpRequest& req, const HttpResponse& res, double s) { impl->log(req, res, s); });
  int port = impl_->http->listen();
  // Jobs reach the studio on this machine, whatever address it listens on.
  const std::string& host = impl_->options.host;
  const std::string url =
      "http://" + (host == "0.0.0.0" || host.empty() ? std::string("127.0.0.1") : host) + ":" + std::to_string(port);
  impl_->jobs->set_studio_url(url);
  impl_->notebooks->set_studio_url(url);
  return port;
}

void StudioServer::stop() {
  if (impl_->http) impl_->http->stop();
  impl_->http.reset();
}

StudioServer::~StudioServer() {
  stop();
  impl_->services.reset();  // stops the instances
  impl_->models.reset();    // waits for the checks in progress
  impl_->jobs.reset();    // stops the jobs still running
  if (impl_->access_log && impl_->access_log != stderr) std::fclose(impl_->access_log);
}

const std::string& StudioServer::database() const { return impl_->db->location(); }

int run_studio(const StudioOptions& options) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  StudioServer studio(options);
  int port = studio.start();
  std::fprintf(stderr, "kiln studio: ready on http://%s:%d (data in %s, database %s)\n", options.host.c_str(), port,
               options.data_dir.c_str(), studio.database().c_str());
  int sig = 0;
  sigwait(&signals, &sig);
  std::fprintf(stderr, "kiln studio: %s received; stopping\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  studio.stop();
  return 0;
}

std::string create_token(const std::string& data_dir, const std::string& name, Scope scope,
                         const std::string& database, int64_t expires_in_ms, const std::string& user) {
  if (database.empty()) std::filesystem::create_directories(data_dir);
  return create_token(*Database::open(database_location(data_dir, database)), name, scope,
                      expires_in_ms > 0 ? now_ms() + expires_in_ms : 0, user);
}

namespace {
std::unique_ptr<Database> open_studio_database(const std::string& data_dir, const std::string& database) {
  if (database.empty()) std::filesystem::create_directories(data_dir);
  return Database::open(database_location(data_dir, database));
}
}  // namespace

void create_user(const std::string& data_dir, const std::string& name, const std::string& password,
                 const std::string& database) {
  create_user(*open_studio_database(data_dir, database), name, password);
}

void set_user_password(const std::string& data_dir, const std::string& name, const std::string& password,
                       const std::string& database) {
  set_password(*open_studio_database(data_dir, database), name, password);
}

void create_project(const std::string& data_dir, const std::string& name, const std::string& database) {
  create_project(*open_studio_database(data_dir, database), name);
}

void set_project_role(const std::string& data_dir, const std::string& project, const std::string& user,
                      const std::string& role, const std::string& database) {
  set_member(*open_studio_database(data_dir, database), project, user, parse_role(role));
}

int revoke_tokens(const std::string& data_dir, const std::string& name, const std::string& database) {
  return revoke_tokens(*Database::open(database_location(data_dir, database)), name);
}

std::string rotate_token(const std::string& data_dir, const std::string& name, int64_t expires_in_ms, int64_t grace_ms,
                         const std::string& database) {
  return rotate_tokens(*Database::open(database_location(data_dir, database)), name,
                       expires_in_ms > 0 ? now_ms() + expires_in_ms : 0, grace_ms);
}

std::vector<TokenListing> list_tokens(const std::string& data_dir, const std::string& database) {
  return list_tokens(*Database::open(database_location(data_dir, database)));
}

}  // namespace kiln::studio

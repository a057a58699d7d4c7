// GET    /api/v1/services                              services with their versions and instances
// POST   /api/v1/services                              deploy {"name", "versions": [{"model", "weight", ...}]}
// GET    /api/v1/services/NAME                         state, versions, instances
// PUT    /api/v1/services/NAME/versions/V              add a version or change one (a new model rolls it over)
// DELETE /api/v1/services/NAME/versions/V
// POST   /api/v1/services/NAME/stop
// DELETE /api/v1/services/NAME                         a stopped service
// GET    /api/v1/services/NAME/metrics                 requests, errors, latency per version
// GET    /api/v1/services/NAME/requests?limit=N        the last N requests forwarded (sampled payloads)
// GET    /api/v1/services/NAME/instances/ID/logs       an instance's log (?grep=REGEX: matching lines)
// GET    /api/v1/services/NAME/v2[/health/...|/models/M[/versions/V][/ready]]   metadata, forwarded to an instance
// POST   /api/v1/services/NAME/v2/models/M[/versions/V]/infer                    inference, forwarded
// POST   /api/v1/services/NAME/v2/repository/...       Triton's repository routes: admin tokens only, audited
#include "studio/service_routes.h"

#include "studio/job_routes.h"

namespace kiln::studio {
namespace {

using json = nlohmann::json;

}  // namespace

bool is_service_proxy_path(const std::string& path) {
  const std::string prefix = "/api/v1/services/";
  if (path.rfind(prefix, 0) != 0) return false;
  size_t slash = path.find('/', prefix.size());
  return slash != std::string::npos && path.compare(slash, 4, "/v2/") == 0;
}

std::optional<ProxyAccess> proxy_access(const std::string& method, const std::string& path) {
  std::vector<std::string> parts;  // of what follows /api/v1/services/NAME/
  size_t start = std::string("/api/v1/services/").size();
  start = path.find('/', start) + 1;
  while (start <= path.size()) {
    const size_t end = path.find('/', start);
    parts.push_back(path.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  const size_t n = parts.size();
  if (n < 1 || parts[0] != "v2") return std::nullopt;
  if (n == 1 || (n == 3 && parts[1] == "health" && (parts[2] == "live" || parts[2] == "ready")))
    return method == "GET" ? std::optional<ProxyAccess>(ProxyAccess{}) : std::nullopt;
  if (n >= 2 && parts[1] == "repository") return ProxyAccess{Scope::Admin, true};
  if (n < 3 || parts[1] != "models" || parts[2].empty()) return std::nullopt;
  size_t at = 3;
  if (n >= 5 && parts[3] == "versions") at = 5;
  if (n == at) return method == "GET" ? std::optional<ProxyAccess>(ProxyAccess{}) : std::nullopt;
  if (n != at + 1) return std::nullopt;
  if (parts[at] == "ready" && method == "GET") return ProxyAccess{};
  if (parts[at] == "infer" && method == "POST") return ProxyAccess{};
  return std::nullopt;
}

void handle_services(Services& services, const serve::HttpRequest& req, serve::HttpResponse& res,
                     const std::vector<std::string>& parts) {
  const size_t n = parts.size();
  const std::string& method = req.method;
  const std::string name = n > 3 ? parts[3] : "";
  if (is_service_proxy_path(req.path)) {
    services.forward(name, req.path.substr(std::string("/api/v1/services/").size() + name.size()), req, res);
  } else if (n == 3 && method == "GET") {
    reply_json(res, 200, services.list());
  } else if (n == 3 && method == "POST") {
    reply_json(res, 201, services.deploy(parse_json_body(req)));
  } else if (n == 4 && method == "GET") {
    reply_json(res, 200, services.get(name));
  } else if (n == 4 && method == "DELETE") {
    services.remove(name);
    res.status = 204;
  } else if (n == 5 && parts[4] == "stop" && method == "POST") {
    services.stop(name);
    reply_json(res, 202, services.get(name));
  } else if (n == 5 && parts[4] == "metrics" && method == "GET") {
    reply_json(res, 200, services.metrics(name));
  } else if (n == 5 && parts[4] == "requests" && method == "GET") {
    const std::string limit = serve::query_param(req.query, "limit").value_or("100");
    KILN_CHECK(!limit.empty() && limit.size() < 6 && limit.find_first_not_of("0123456789") == std::string::npos,
               "?limit= takes a whole number of requests, such as 100, not '", serve::printable(limit), "'");
    reply_json(res, 200, services.requests(name, std::stoi(limit)));
  } else if (n == 6 && parts[4] == "versions" && method == "PUT") {
    reply_json(res, 200, services.set_version(name, parts[5], parse_json_body(req)));
  } else if (n == 6 && parts[4] == "versions" && method == "DELETE") {
    services.remove_version(name, parts[5]);
    res.status = 204;
  } else if (n == 7 && parts[4] == "instances" && parts[6] == "logs" && method == "GET") {
    int id = 0;
    try {
      id = std::stoi(parts[5]);
    } catch (const std::exception&) {
      KILN_FAIL("'", parts[5], "' is not an instance id");
    }
    res.content_type = "text/plain; charset=utf-8";
    res.body = services.logs(name, id, serve::query_param(req.query, "grep").value_or(""));
  } else {
    serve::set_error(res, 404, "no endpoint " + method + " " + serve::printable(req.path) +
                                   " (see docs/studio.md, \"Online services\")");
  }
}

}  // namespace kiln::studio

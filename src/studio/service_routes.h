#pragma once
// The online services' endpoints (/api/v1/services...), the OIP v2 proxy included.
#include <optional>
#include <string>
#include <vector>

#include "kiln/studio.h"
#include "serve/http_server.h"
#include "studio/services.h"

namespace kiln::studio {

// Whether a path is a request for a service's instances (/api/v1/services/NAME/v2/...).
bool is_service_proxy_path(const std::string& path);

// What the proxy forwards, and to whom: inference and metadata to a read
// token (not audited: they change nothing), the repository's load and unload
// to an admin token (audited); nothing else (nullopt, answered 404).
struct ProxyAccess {
  Scope needed = Scope::Read;
  bool audited = false;
};
std::optional<ProxyAccess> proxy_access(const std::string& method, const std::string& path);

// parts: the path split at '/' ("api", "v1", "services", ...).
void handle_services(Services& services, const serve::HttpRequest& req, serve::HttpResponse& res,
                     const std::vector<std::string>& parts);

}  // namespace kiln::studio

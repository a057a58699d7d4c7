#pragma once
// The online services' endpoints (/api/v1/services...), the OIP v2 proxy included.
#include <string>
#include <vector>

#include "serve/http_server.h"
#include "studio/services.h"

namespace kiln::studio {

// Whether a path is a request for a service's instances (/api/v1/services/NAME/v2/...):
// inference, which a read token may send and the audit log does not record.
bool is_service_proxy_path(const std::string& path);

// parts: the path split at '/' ("api", "v1", "services", ...).
void handle_services(Services& services, const serve::HttpRequest& req, serve::HttpResponse& res,
                     const std::vector<std::string>& parts);

}  // namespace kiln::studio

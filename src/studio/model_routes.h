#pragma once
// The model registry's endpoints (/api/v1/models...).
#include <string>
#include <vector>

#include "serve/http_server.h"
#include "studio/models.h"

namespace kiln::studio {

// parts: the path split at '/' ("api", "v1", "models", ...).
void handle_models(Models& models, const serve::HttpRequest& req, serve::HttpResponse& res,
                   const std::vector<std::string>& parts, const std::string& token_name);

}  // namespace kiln::studio

#pragma once
// The jobs endpoints of the studio's API (/api/v1/jobs...).
#include <string>
#include <vector>

#include "serve/http_server.h"
#include "studio/jobs.h"
#include "studio/runs.h"

namespace kiln::studio {

// Answers with a JSON body.
void reply_json(serve::HttpResponse& res, int status, const nlohmann::json& body);
// The request's JSON body ({} when empty); malformed JSON is a clear error (400).
nlohmann::json parse_json_body(const serve::HttpRequest& req);

// parts: the path split at '/' ("api", "v1", "jobs", ...).
void handle_jobs(Jobs& jobs, Runs& runs, const serve::HttpRequest& req, serve::HttpResponse& res,
                 const std::vector<std::string>& parts, const std::string& token_name);

}  // namespace kiln::studio

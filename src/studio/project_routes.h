#pragma once
// The projects and notebooks endpoints of the studio's API
// (/api/v1/projects..., /api/v1/notebooks...). Who may call which is judged
// before they run (access.h).
#include <string>
#include <vector>

#include "serve/http_server.h"
#include "studio/database.h"
#include "studio/jobs.h"
#include "studio/notebooks.h"

namespace kiln::studio {

// user: the caller's (empty for a studio-wide token); parts: the path split at '/'.
void handle_projects(Database& db, Jobs& jobs, const serve::HttpRequest& req, serve::HttpResponse& res,
                     const std::vector<std::string>& parts, const std::string& user);
void handle_notebooks(Notebooks& notebooks, const serve::HttpRequest& req, serve::HttpResponse& res,
                      const std::vector<std::string>& parts, const std::string& user);

}  // namespace kiln::studio

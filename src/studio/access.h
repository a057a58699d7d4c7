#pragma once
// What a user's token may do: every request acts in one project (the one its
// resource belongs to, or the one a creation names), and needs the user's
// role there to be at least what its scope asks (viewer reads, developer
// writes, admin manages the project). Lists show the user's projects' items
// only; the studio's own routes (tokens, the audit log) are for studio-wide
// tokens. Tokens without a user are not judged here.
#include <string>
#include <vector>

#include "serve/http_server.h"
#include "studio/database.h"
#include "studio/projects.h"

namespace kiln::studio {

struct RequestTarget {
  enum Kind {
    InProject,  // acts in `project`
    List,       // a list of `what`: answered with the user's projects' items
    Anyone,     // the caller's own view (whoami, its projects)
    StudioOnly  // for studio-wide tokens
  } kind = InProject;
  std::string project;
  std::string what;  // List: "jobs", "models", "services" or "buckets"
  Role role = Role::Viewer;
};

// "/api/v1/jobs/3" -> "api", "v1", "jobs", "3".
std::vector<std::string> split_path(const std::string& path);

// needed: the scope the request asks of a token (read for GET).
RequestTarget request_target(Database& db, const serve::HttpRequest& req, Scope needed);

// What else a creation reaches, beyond its own project: the buckets a job
// (or a retry of one) reads (viewer) and writes (developer), the job or
// object a model version comes from, the models a service serves (viewer).
// Each as its project and the role it needs there, with what it is, for messages.
struct Reference {
  std::string project, what;
  Role role = Role::Viewer;
};
std::vector<Reference> request_references(Database& db, const serve::HttpRequest& req);

// Keeps the items of a list answer (res.body, {"<what>": [...]}) that belong
// to projects the user has a role in.
void keep_users_items(Database& db, serve::HttpResponse& res, const std::string& what, const std::string& user);

}  // namespace kiln::studio

// GET    /api/v1/projects                          the caller's projects, with members and quotas
// GET    /api/v1/projects/P                        one project
// PUT    /api/v1/projects/P/quota                  what its running jobs may hold
// PUT    /api/v1/projects/P/members/USER, DELETE   a member's role
// GET    /api/v1/projects/P/secrets                its secrets' names
// PUT    /api/v1/projects/P/secrets/NAME, DELETE   a secret's value (the body)
// GET    /api/v1/notebooks, POST                   list; create and start
// GET    /api/v1/notebooks/N, DELETE               one; delete a stopped one
// POST   /api/v1/notebooks/N/start, .../stop
// GET    /api/v1/notebooks/N/open?token=T          a browser's way in
//        /api/v1/notebooks/N/proxy/...             Jupyter itself
#include "studio/project_routes.h"

#include "studio/job_routes.h"
#include "studio/job_spec.h"
#include "studio/projects.h"

namespace kiln::studio {
namespace {

using json = nlohmann::json;

json project_json(const ProjectInfo& p) {
  json members = json::array();
  for (const auto& m : p.members) members.push_back({{"user", m.user}, {"role", role_name(m.role)}});
  return {{"name", p.name},
          {"created_ms", p.created_ms},
          {"members", members},
          {"quota", {{"cpus", p.quota.cpus}, {"memory_mb", p.quota.memory_mb}, {"gpus", p.quota.gpus}}}};
}

}  // namespace

void handle_notebooks(Notebooks& notebooks, const serve::HttpRequest& req, serve::HttpResponse& res,
                      const std::vector<std::string>& parts, const std::string& user) {
  const size_t n = parts.size();
  const std::string name = n > 3 ? parts[3] : "";
  if (n >= 5 && parts[4] == "proxy") {
    notebooks.forward(name, req, res);
  } else if (n == 3 && req.method == "GET") {
    reply_json(res, 200, notebooks.list());
  } else if (n == 3 && req.method == "POST") {
    reply_json(res, 201, notebooks.create(parse_json_body(req), user));
  } else if (n == 4 && req.method == "GET") {
    reply_json(res, 200, notebooks.get(name));
  } else if (n == 4 && req.method == "DELETE") {
    notebooks.remove(name);
    res.status = 204;
  } else if (n == 5 && parts[4] == "start" && req.method == "POST") {
    reply_json(res, 202, notebooks.start(name));
  } else if (n == 5 && parts[4] == "stop" && req.method == "POST") {
    reply_json(res, 202, notebooks.stop(name));
  } else if (n == 5 && parts[4] == "open" && req.method == "GET") {
    // A browser's way in: the token (from ?token=) becomes a cookie for this notebook's paths only.
    notebooks.get(name);
    const std::string secret = serve::query_param(req.query, "token").value_or("");
    res.status = 302;
    res.headers.emplace_back("Set-Cookie", "kiln_token=" + secret + "; Path=/api/v1/notebooks/" + name +
                                               "/; HttpOnly; SameSite=Strict");
    res.headers.emplace_back("Location", "/api/v1/notebooks/" + name + "/proxy/tree");
    res.body = "";
  } else {
    serve::set_error(res, 404, "no endpoint " + req.method + " " + serve::printable(req.path) + " (see docs/studio.md)");
  }
}

void handle_projects(Database& db, Jobs& jobs, const serve::HttpRequest& req, serve::HttpResponse& res,
                     const std::vector<std::string>& parts, const std::string& user) {
  const size_t n = parts.size();
  const std::string project = n > 3 ? parts[3] : "";
  if (n > 3 && !project_exists(db, project)) throw NotFound("no project '" + project + "'");
  if (n == 3 && req.method == "GET") {
    json out = json::array();
    for (const auto& p : list_projects(db, user)) out.push_back(project_json(p));
    reply_json(res, 200, {{"projects", out}});
  } else if (n == 4 && req.method == "GET") {
    reply_json(res, 200, project_json(project_info(db, project)));
  } else if (n == 5 && parts[4] == "quota" && req.method == "PUT") {
    const json body = parse_json_body(req);
    KILN_CHECK(body.is_object(), "a quota is {\"cpus\": N, \"memory_mb\": N, \"gpus\": N} (0: no limit)");
    for (auto& [k, v] : body.items())
      KILN_CHECK((k == "cpus" || k == "memory_mb" || k == "gpus") && v.is_number_integer() && v.get<int64_t>() >= 0,
                 "a quota is {\"cpus\": N, \"memory_mb\": N, \"gpus\": N}, whole numbers from 0 (no limit); not '", k,
                 "': ", v.dump());
    jobs.set_quota(project, {body.value("cpus", 0), body.value("memory_mb", int64_t{0}), body.value("gpus", 0)});
    reply_json(res, 200, project_json(project_info(db, project)));
  } else if (n == 6 && parts[4] == "members" && req.method == "PUT") {
    const json body = parse_json_body(req);
    KILN_CHECK(body.is_object() && body.contains("role") && body["role"].is_string(),
               "a member is {\"role\": \"viewer\" | \"developer\" | \"admin\"}");
    set_member(db, project, parts[5], parse_role(body["role"]));
    reply_json(res, 200, {{"project", project}, {"user", parts[5]}, {"role", body["role"]}});
  } else if (n == 6 && parts[4] == "members" && req.method == "DELETE") {
    set_member(db, project, parts[5], Role::None);
    res.status = 204;
  } else if (n == 5 && parts[4] == "secrets" && req.method == "GET") {
    // Names only: a secret's value is never shown back.
    Statement s(db, "SELECT name FROM project_secrets WHERE project = ? ORDER BY name");
    s.bind(1, project);
    json names = json::array();
    while (s.step()) names.push_back(s.text(0));
    reply_json(res, 200, {{"project", project}, {"secrets", names}});
  } else if (n == 6 && parts[4] == "secrets" && req.method == "PUT") {
    const std::string& name = parts[5];
    KILN_CHECK(name.size() <= 128 && valid_env_name(name),
               "a secret's name is an environment variable's: letters, digits and '_', not starting with a digit");
    KILN_CHECK(req.body.size() <= 64 * 1024, "a secret holds at most 64 KiB");
    Statement(db, "INSERT INTO project_secrets (project, name, value) VALUES (?, ?, ?) "
                   "ON CONFLICT (project, name) DO UPDATE SET value = excluded.value")
        .bind(1, project).bind(2, name).bind(3, req.body).run();
    reply_json(res, 200, {{"project", project}, {"secret", name}});
  } else if (n == 6 && parts[4] == "secrets" && req.method == "DELETE") {
    if (Statement(db, "DELETE FROM project_secrets WHERE project = ? AND name = ?").bind(1, project).bind(2, parts[5]).run() == 0)
      throw NotFound("project '" + project + "' has no secret '" + parts[5] + "'");
    res.status = 204;
  } else {
    serve::set_error(res, 404, "no endpoint " + req.method + " " + serve::printable(req.path) + " (see docs/studio.md)");
  }
}

}  // namespace kiln::studio

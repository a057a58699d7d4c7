#include "studio/access.h"

#include <nlohmann/json.hpp>
#include <set>
#include <vector>

namespace kiln::studio {
namespace {

// The project of a row, or `fallback` when there is none (the route then
// answers 404, or creates it in `fallback`).
std::string project_in(Database& db, const char* sql, const std::string& key, const std::string& fallback) {
  Statement s(db, sql);
  s.bind(1, key);
  return s.step() ? s.text(0) : fallback;
}

std::string job_project(Database& db, const std::string& id) {
  if (id.empty() || id.size() > 18 || id.find_first_not_of("0123456789") != std::string::npos) return kDefaultProject;
  Statement s(db, "SELECT project FROM jobs WHERE id = ?");
  s.bind(1, static_cast<int64_t>(std::stoll(id)));
  return s.step() ? s.text(0) : kDefaultProject;
}

// A model URI's model name: NAME, NAME@ALIAS, NAME/VERSION, models:/NAME/...
std::string model_of_uri(std::string uri) {
  if (uri.rfind("models:/", 0) == 0) uri = uri.substr(8);
  return uri.substr(0, uri.find_first_of("@/"));
}

}  // namespace

RequestTarget request_target(Database& db, const serve::HttpRequest& req, Scope needed) {
  const std::vector<std::string> parts = split_path(req.path);  // "api", "v1", what, ...
  const size_t n = parts.size();
  const std::string what = n > 2 ? parts[2] : "";
  const std::string name = n > 3 ? parts[3] : "";
  const bool get = req.method == "GET" || req.method == "HEAD";
  RequestTarget t;
  t.role = role_for(needed);
  if (what == "whoami" || (what == "projects" && n == 3 && get)) {
    t.kind = RequestTarget::Anyone;
  } else if ((what == "jobs" || what == "models" || what == "services" || what == "buckets" || what == "notebooks") &&
             n == 3 && get) {
    t.kind = RequestTarget::List;
    t.what = what;
  } else if (what == "jobs") {
    t.project = n == 3 ? requested_project(req) : job_project(db, name);
  } else if (what == "models") {
    const std::string model =
        name == "resolve" ? model_of_uri(serve::query_param(req.query, "uri").value_or("")) : name;
    const std::string created = n == 5 && req.method == "POST" ? requested_project(req) : std::string(kDefaultProject);
    t.project = project_in(db, "SELECT project FROM models WHERE name = ?", model, created);
  } else if (what == "notebooks") {
    t.project = n == 3 ? requested_project(req)
                       : project_in(db, "SELECT project FROM notebooks WHERE name = ?", name, kDefaultProject);
  } else if (what == "services") {
    t.project = n == 3 ? requested_project(req)
                       : project_in(db, "SELECT project FROM services WHERE name = ?", name, kDefaultProject);
  } else if (what == "buckets") {
    const std::string created = n == 4 && req.method == "PUT" ? requested_project(req) : std::string(kDefaultProject);
    t.project = project_in(db, "SELECT project FROM buckets WHERE name = ?", name, created);
  } else if (what == "projects" && n == 5 && parts[4] == "quota" && !get) {
    t.kind = RequestTarget::StudioOnly;  // an operator's decision, not the project's
  } else if (what == "projects" && n >= 4) {
    // The project and its members are shown to its viewers; its secrets'
    // names, and every change, are for its admins.
    t.project = name;
    const bool members = n == 4 || (n >= 5 && parts[4] == "members");
    t.role = get && members ? Role::Viewer : Role::Admin;
  } else {
    t.kind = RequestTarget::StudioOnly;
  }
  return t;
}

std::vector<Reference> request_references(Database& db, const serve::HttpRequest& req) {
  std::vector<Reference> out;
  if (req.method != "POST") return out;
  const std::vector<std::string> parts = split_path(req.path);
  const auto body = nlohmann::json::parse(req.body, nullptr, false);
  auto bucket_of = [&](const nlohmann::json& url, Role role, const std::string& what) {
    if (!url.is_string()) return;
    const std::string u = url;
    if (u.rfind("studio://", 0) != 0) return;
    const std::string bucket = u.substr(9, u.find('/', 9) == std::string::npos ? std::string::npos : u.find('/', 9) - 9);
    out.push_back({project_in(db, "SELECT project FROM buckets WHERE name = ?", bucket, kDefaultProject),
                   what + " " + u, role});
  };
  auto job_reaches = [&](const nlohmann::json& spec) {
    const nlohmann::json inputs = spec.value("inputs", nlohmann::json::object());
    for (const auto& [name, url] : inputs.items()) bucket_of(url, Role::Viewer, "input");
    bucket_of(spec.value("code", nlohmann::json()), Role::Viewer, "code");
    bucket_of(spec.value("output", nlohmann::json()), Role::Developer, "output");
  };
  if (parts.size() == 5 && parts[2] == "jobs" && parts[4] == "retry") {
    // A retry reaches what the job reaches, judged again now.
    const std::string& id = parts[3];
    if (id.empty() || id.size() > 18 || id.find_first_not_of("0123456789") != std::string::npos) return out;
    Statement job(db, "SELECT spec FROM jobs WHERE id = ?");
    job.bind(1, static_cast<int64_t>(std::stoll(id)));
    if (!job.step()) return out;
    const auto spec = nlohmann::json::parse(job.text(0), nullptr, false);
    if (spec.is_object()) job_reaches(spec);
  } else if (!body.is_object()) {
    return out;
  } else if (parts.size() == 3 && parts[2] == "jobs") {
    job_reaches(body);
  } else if (parts.size() == 5 && parts[2] == "models" && parts[4] == "versions") {
    if (body.contains("job") && body["job"].is_number_integer())
      out.push_back({job_project(db, std::to_string(body["job"].get<int64_t>())),
                     "job " + std::to_string(body["job"].get<int64_t>()), Role::Viewer});
    bucket_of(body.value("url", nlohmann::json()), Role::Viewer, "model file");
  } else if (parts.size() == 3 && parts[2] == "services") {
    const nlohmann::json versions = body.value("versions", nlohmann::json::array());
    for (const auto& v : versions)
      if (v.is_object() && v.contains("model") && v["model"].is_string())
        out.push_back({project_in(db, "SELECT project FROM models WHERE name = ?", model_of_uri(v["model"]),
                                  kDefaultProject),
                       "model " + v["model"].get<std::string>(), Role::Viewer});
  }
  return out;
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  for (size_t at = 1; at <= path.size();) {
    const size_t end = path.find('/', at);
    parts.push_back(path.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return parts;
}

void keep_users_items(Database& db, serve::HttpResponse& res, const std::string& what, const std::string& user) {
  if (res.status != 200) return;
  auto body = nlohmann::json::parse(res.body, nullptr, false);
  if (!body.is_object() || !body.contains(what) || !body[what].is_array()) return;
  std::set<std::string> projects;
  for (const auto& p : list_projects(db, user)) projects.insert(p.name);
  nlohmann::json kept = nlohmann::json::array();
  for (auto& item : body[what]) {
    // Buckets are listed by name; the rest carry their project.
    const std::string project =
        item.is_string() ? project_in(db, "SELECT project FROM buckets WHERE name = ?", item.get<std::string>(), "")
                         : item.value("project", std::string(kDefaultProject));
    if (projects.count(project)) kept.push_back(std::move(item));
  }
  body[what] = std::move(kept);
  res.body = body.dump();
}

}  // namespace kiln::studio

// GET    /api/v1/models                                  models, their version counts and aliases
// GET    /api/v1/models/resolve?uri=fmnist@production    the version a URI names
// GET    /api/v1/models/NAME                             a model and all its versions
// DELETE /api/v1/models/NAME                             the model, its versions and aliases
// POST   /api/v1/models/NAME/versions                    register: {"job": ID} or {"url": "studio://..."}
//                                                        (JSON), or the ONNX file as the body
// GET    /api/v1/models/NAME/versions/V                  V: a number, an alias or "latest"
// PATCH  /api/v1/models/NAME/versions/V                  {"description": ..., "tags": {...}}
// DELETE /api/v1/models/NAME/versions/V
// GET    /api/v1/models/NAME/versions/V/file             the ONNX file
// PUT    /api/v1/models/NAME/aliases/ALIAS               {"version": N}
// DELETE /api/v1/models/NAME/aliases/ALIAS
#include "studio/model_routes.h"

#include "studio/projects.h"

#include "studio/job_routes.h"

namespace kiln::studio {
namespace {

using json = nlohmann::json;

int64_t version_number(const std::string& text) {
  KILN_CHECK(!text.empty() && text.size() < 18 && std::all_of(text.begin(), text.end(), ::isdigit), "'", text,
             "' is not a version number");
  return std::stoll(text);
}

RegisterRequest register_request(const serve::HttpRequest& req) {
  RegisterRequest r;
  const std::string* type = req.header("Content-Type");
  if (type && type->rfind("application/octet-stream", 0) == 0) {
    KILN_CHECK(!req.body.empty(), "the request body holds no ONNX file");
    r.bytes = req.body;
    r.description = serve::query_param(req.query, "description").value_or("");
    r.project = requested_project(req);
    return r;
  }
  json body = parse_json_body(req);
  KILN_CHECK(body.is_object(), "a registration is {\"job\": ID} or {\"url\": \"studio://bucket/key.onnx\"}, or an "
                               "ONNX file sent as application/octet-stream");
  for (auto& [k, v] : body.items())
    KILN_CHECK(k == "job" || k == "url" || k == "input_shape" || k == "description" || k == "tags" || k == "project",
               "unknown field '", k, "' (job, url, input_shape, description, tags, project)");
  r.project = requested_project(req);
  if (body.contains("job")) {
    KILN_CHECK(body["job"].is_number_integer(), "\"job\" must be a job id");
    r.job = body["job"];
  }
  if (body.contains("url")) {
    KILN_CHECK(body["url"].is_string(), "\"url\" must be a studio:// URL");
    r.url = body["url"];
  }
  if (body.contains("input_shape")) {
    KILN_CHECK(body["input_shape"].is_array(), "\"input_shape\" must be a list of sizes, like [1, 1, 28, 28]");
    for (auto& d : body["input_shape"]) {
      KILN_CHECK(d.is_number_integer() && d.get<int64_t>() > 0, "\"input_shape\" holds positive sizes");
      r.input_shape.push_back(d);
    }
  }
  if (body.contains("description")) r.description = body["description"].is_string() ? body["description"] : "";
  if (body.contains("tags")) r.tags = body["tags"];
  return r;
}

}  // namespace

void handle_models(Models& models, const serve::HttpRequest& req, serve::HttpResponse& res,
                   const std::vector<std::string>& parts, const std::string& token_name) {
  const size_t n = parts.size();
  const std::string& method = req.method;
  const std::string name = n > 3 ? parts[3] : "";
  if (n == 3 && method == "GET") {
    reply_json(res, 200, models.list());
  } else if (n == 4 && name == "resolve" && method == "GET") {
    auto uri = serve::query_param(req.query, "uri");
    KILN_CHECK(uri, "resolve needs ?uri=NAME@ALIAS, NAME/VERSION or models:/...");
    reply_json(res, 200, models.resolve(*uri).json());
  } else if (n == 4 && method == "GET") {
    reply_json(res, 200, models.model(name));
  } else if (n == 4 && method == "DELETE") {
    models.delete_model(name);
    res.status = 204;
  } else if (n == 5 && parts[4] == "versions" && method == "POST") {
    reply_json(res, 201, models.register_version(name, register_request(req), token_name).json());
  } else if (n == 6 && parts[4] == "versions" && method == "GET") {
    reply_json(res, 200, models.version(name, parts[5]).json());
  } else if (n == 6 && parts[4] == "versions" && method == "PATCH") {
    models.update(name, version_number(parts[5]), parse_json_body(req));
    reply_json(res, 200, models.version(name, parts[5]).json());
  } else if (n == 6 && parts[4] == "versions" && method == "DELETE") {
    models.delete_version(name, version_number(parts[5]));
    res.status = 204;
  } else if (n == 7 && parts[4] == "versions" && parts[6] == "file" && method == "GET") {
    ModelVersion v = models.version(name, parts[5]);
    res.content_type = "application/octet-stream";
    res.headers.emplace_back("X-Kiln-Sha256", v.sha256);
    res.headers.emplace_back("X-Kiln-Model-Version", std::to_string(v.version));
    res.body = models.file(v);
  } else if (n == 6 && parts[4] == "aliases" && method == "PUT") {
    json body = parse_json_body(req);
    KILN_CHECK(body.is_object() && body.contains("version") && body["version"].is_number_integer(),
               "an alias is set with {\"version\": N}");
    models.set_alias(name, parts[5], body["version"]);
    reply_json(res, 200, models.version(name, parts[5]).json());
  } else if (n == 6 && parts[4] == "aliases" && method == "DELETE") {
    models.delete_alias(name, parts[5]);
    res.status = 204;
  } else {
    serve::set_error(res, 404, "no endpoint " + method + " " + serve::printable(req.path) +
                                   " (see docs/studio.md, \"Model registry\")");
  }
}

}  // namespace kiln::studio

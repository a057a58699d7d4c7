#include "studio/job_routes.h"

#include "kiln/error.h"
#include "kiln/launch.h"

namespace kiln::studio {
namespace {

using json = nlohmann::json;

int64_t number_param(const serve::HttpRequest& req, const char* name, int64_t fallback) {
  auto v = serve::query_param(req.query, name);
  if (!v) return fallback;
  try {
    return std::stoll(*v);
  } catch (const std::exception&) {
    KILN_FAIL("query parameter '", name, "' must be a number, not '", *v, "'");
  }
}

int64_t job_id(const std::string& text) {
  try {
    size_t used = 0;
    int64_t id = std::stoll(text, &used);
    if (used == text.size() && id > 0) return id;
  } catch (const std::exception&) {
  }
  throw NotFound("no job '" + text + "'; job ids are numbers (kiln job list)");
}

}  // namespace

void reply_json(serve::HttpResponse& res, int status, const json& body) {
  res.status = status;
  res.content_type = "application/json";
  res.body = body.dump();
}

json parse_json_body(const serve::HttpRequest& req) {
  try {
    return req.body.empty() ? json::object() : json::parse(req.body);
  } catch (const json::exception& e) {
    KILN_FAIL("the request body is not valid JSON: ", e.what());
  }
}

void handle_jobs(Jobs& jobs, Runs& runs, const serve::HttpRequest& req, serve::HttpResponse& res,
                 const std::vector<std::string>& parts, const std::string& token_name) {
  if (parts.size() == 3 && req.method == "POST") {
    int64_t id = jobs.submit(parse_job_spec(parse_json_body(req)), token_name);
    reply_json(res, 201, {{"id", id}});
  } else if (parts.size() == 3 && req.method == "GET") {
    // ?tag=KEY=VALUE keeps the jobs with that tag.
    const std::string tag = serve::query_param(req.query, "tag").value_or("");
    const size_t eq = tag.find('=');
    KILN_CHECK(tag.empty() || (eq != std::string::npos && eq > 0), "?tag= takes KEY=VALUE, not '", tag, "'");
    json list = json::array();
    for (const auto& j : jobs.list(static_cast<int>(number_param(req, "limit", 100)))) {
      if (!tag.empty() && !runs.has_tag(j.id, tag.substr(0, eq), tag.substr(eq + 1))) continue;
      json item = j.json();
      item["tags"] = runs.tags(j.id);
      list.push_back(item);
    }
    reply_json(res, 200, {{"jobs", list}});
  } else if (parts.size() == 4 && req.method == "GET") {
    auto job = jobs.get(job_id(parts[3]));
    if (!job) throw NotFound("no job " + parts[3]);
    json item = job->json();
    item["tags"] = runs.tags(job->id);
    reply_json(res, 200, item);
  } else if (parts.size() == 5 && parts[4] == "tags") {
    int64_t id = job_id(parts[3]);
    if (!jobs.get(id)) throw NotFound("no job " + parts[3]);
    if (req.method != "GET") {
      KILN_CHECK(req.method == "PATCH" || req.method == "POST", req.method, " is not allowed on tags (GET, PATCH)");
      runs.set_tags(id, parse_json_body(req));
    }
    reply_json(res, 200, {{"tags", runs.tags(id)}});
  } else if (parts.size() == 5 && parts[4] == "retry" && req.method == "POST") {
    auto job = jobs.get(job_id(parts[3]));
    if (!job) throw NotFound("no job " + parts[3]);
    reply_json(res, 201, {{"id", jobs.submit(job->spec, token_name)}, {"retry_of", job->id}});
  } else if (parts.size() == 5 && parts[4] == "stop" && req.method == "POST") {
    jobs.stop(job_id(parts[3]));
    reply_json(res, 202, {{"id", job_id(parts[3])}, {"state", "Terminating"}});
  } else if (parts.size() == 5 && (parts[4] == "params" || parts[4] == "metrics")) {
    int64_t id = job_id(parts[3]);
    if (!jobs.get(id)) throw NotFound("no job " + parts[3]);
    if (req.method == "GET") {
      reply_json(res, 200, parts[4] == "params" ? runs.params(id)
                                           : runs.metrics(id, serve::query_param(req.query, "key").value_or("")));
      return;
    }
    KILN_CHECK(req.method == "POST", req.method, " is not allowed on ", parts[4], " (GET, POST)");
    const json body = parse_json_body(req);
    if (parts[4] == "params") runs.log_params(id, body);
    else runs.log_metrics(id, body);
    res.status = 204;
  } else if (parts.size() == 5 && parts[4] == "logs" && req.method == "GET") {
    int64_t id = job_id(parts[3]);
    if (!jobs.get(id)) throw NotFound("no job " + parts[3]);
    dist::LogQuery query;
    if (auto rank = serve::query_param(req.query, "rank")) query.rank = static_cast<int>(number_param(req, "rank", 0));
    query.pattern = serve::query_param(req.query, "grep").value_or("");
    std::vector<dist::LogLine> lines;
    try {
      lines = dist::read_logs(jobs.folder(id) + "/logs", query);
    } catch (const Error&) {
      lines.clear();  // no rank has written yet
    }
    const int64_t total = static_cast<int64_t>(lines.size());
    const int64_t from = std::clamp<int64_t>(number_param(req, "from_line", 0), 0, total);
    const int64_t count = std::clamp<int64_t>(number_param(req, "lines", 1000), 0, 100000);
    const bool newest_first = serve::query_param(req.query, "order").value_or("asc") == "desc";
    json out = json::array();
    for (int64_t i = from; i < total && i < from + count; ++i) {
      const auto& l = lines[static_cast<size_t>(newest_first ? total - 1 - i : i)];
      out.push_back({{"time", l.time}, {"host", l.host}, {"rank", l.rank}, {"text", l.text}});
    }
    reply_json(res, 200, {{"lines", out}, {"total", total}, {"from_line", from}});
  } else {
    serve::set_error(res, 404, "no endpoint " + req.method + " " + serve::printable(req.path) + " (see docs/studio.md)");
  }
}

}  // namespace kiln::studio

#include "studio/job_routes.h"

#include <regex>
#include <thread>

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

// A count a client may ask for: inside [lo, hi], or a 400 that says so (a
// negative LIMIT would mean "everything" to the database).
int64_t count_param(const serve::HttpRequest& req, const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const int64_t v = number_param(req, name, fallback);
  KILN_CHECK(v >= lo && v <= hi, "query parameter '", name, "' must be from ", lo, " to ", hi, ", not ", v);
  return v;
}

void check_pattern(const std::string& pattern) {
  try {
    std::regex check(pattern);
  } catch (const std::regex_error& e) {
    KILN_FAIL("grep '", pattern, "' is not a regular expression (", e.what(), ")");
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

bool ended(const std::string& state) {
  return state == "Completed" || state == "Failed" || state == "Terminated" || state == "Abnormal";
}

json line_json(const dist::LogLine& l) {
  return {{"time", l.time}, {"host", l.host}, {"rank", l.rank}, {"text", l.text}};
}

// GET .../logs?follow=true (or Accept: text/event-stream): server-sent
// events, one `line` event per log line (its id the count of lines sent, so
// a client that reconnects with Last-Event-ID misses nothing and repeats
// nothing), a comment every 15 s while nothing happens, and an `end` event
// with the job's state once it is over and its last lines are out.
void follow_job_logs(Jobs& jobs, int64_t id, const dist::LogQuery& query, int64_t skip, serve::HttpResponse& res) {
  check_pattern(query.pattern);  // a 400 now: once the stream has started, nothing can say so
  res.content_type = "text/event-stream";
  res.headers.emplace_back("Cache-Control", "no-store");
  res.headers.emplace_back("X-Accel-Buffering", "no");  // a proxy in front must not hold events back
  res.stream = [&jobs, id, query, skip](const serve::HttpResponse::Send& send) {
    using Clock = std::chrono::steady_clock;
    int64_t count = 0;
    bool open = send("retry: 1000\n\n");
    auto quiet_since = Clock::now();
    std::string state;
    int polls_after_end = 0;
    auto over = [&] {
      auto job = jobs.get(id);
      state = job ? job->state : "Deleted";
      return ended(state);
    };
    const std::string dir = jobs.folder(id) + "/logs";
    auto has_logs = [&] {
      try {
        return !dist::log_files(dir).empty();
      } catch (const Error&) {
        return false;
      }
    };
    // Until a rank has written its first line (the job may still be staging its inputs).
    while (open && !has_logs() && !over() && send(""))
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto emit = [&](const dist::LogLine& l) {
      if (!open || count++ < skip) return;
      open = send("id: " + std::to_string(count) + "\nevent: line\ndata: " + line_json(l).dump() + "\n\n");
      quiet_since = Clock::now();
    };
    auto keep_going = [&] {
      if (!open || !send("")) return false;
      if (Clock::now() - quiet_since > std::chrono::seconds(15)) {
        open = send(": still following\n\n");
        quiet_since = Clock::now();
      }
      // Once the job is over, one more look for the lines its ranks wrote last.
      return !over() || polls_after_end++ < 1;
    };
    if (open && has_logs()) dist::follow_logs(dir, query, emit, keep_going);
    if (state.empty()) over();
    if (open) send("event: end\ndata: " + json{{"state", state}, {"lines", count}}.dump() + "\n\n");
  };
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
    for (const auto& j : jobs.list(static_cast<int>(count_param(req, "limit", 100, 1, 10000)))) {
      if (!tag.empty() && !runs.has_tag(j.id, tag.substr(0, eq), tag.substr(eq + 1))) continue;
      json item = j.json();
      item["tags"] = runs.tags(j.id);
      item["final_metrics"] = runs.final_metrics(j.id);
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
    reply_json(res, 201, {{"id", jobs.retry(job->id, token_name)}, {"retry_of", job->id}});
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
    check_pattern(query.pattern);  // not "no lines match"
    const std::string* accept = req.header("Accept");
    if (serve::query_param(req.query, "follow").value_or("false") == "true" ||
        (accept && accept->find("text/event-stream") != std::string::npos)) {
      const std::string* last = req.header("Last-Event-ID");
      int64_t skip = number_param(req, "from_line", 0);
      if (last) {
        try {
          skip = std::max<int64_t>(0, std::stoll(*last));
        } catch (const std::exception&) {
          KILN_FAIL("Last-Event-ID must be the id of an event this stream sent (a number), not '", *last, "'");
        }
      }
      follow_job_logs(jobs, id, query, skip, res);
      return;
    }
    std::vector<dist::LogLine> lines;
    try {
      lines = dist::read_logs(jobs.folder(id) + "/logs", query);
    } catch (const Error&) {
      lines.clear();  // no rank has written yet
    }
    const int64_t total = static_cast<int64_t>(lines.size());
    const int64_t from = std::clamp<int64_t>(number_param(req, "from_line", 0), 0, total);
    const int64_t count = count_param(req, "lines", 1000, 0, 100000);
    const bool newest_first = serve::query_param(req.query, "order").value_or("asc") == "desc";
    json out = json::array();
    for (int64_t i = from; i < total && i < from + count; ++i) {
      const auto& l = lines[static_cast<size_t>(newest_first ? total - 1 - i : i)];
      out.push_back(line_json(l));
    }
    reply_json(res, 200, {{"lines", out}, {"total", total}, {"from_line", from}});
  } else {
    serve::set_error(res, 404, "no endpoint " + req.method + " " + serve::printable(req.path) + " (see docs/studio.md)");
  }
}

}  // namespace kiln::studio

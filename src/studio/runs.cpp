#include "studio/runs.h"

#include "kiln/error.h"
#include "studio/tokens.h"

namespace kiln::studio {

using json = nlohmann::json;

void Runs::log_params(int64_t job, const json& body) {
  KILN_CHECK(body.is_object() && body.contains("params") && body["params"].is_object(),
             "parameters are {\"params\": {\"name\": \"value\", ...}}");
  Transaction t(db_);
  for (auto& [key, value] : body["params"].items()) {
    std::string text = value.is_string() ? value.get<std::string>() : value.dump();
    KILN_CHECK(!key.empty() && key.size() <= 250, "a parameter name has 1 to 250 characters");
    Statement s(db_, "SELECT value FROM run_params WHERE job_id = ? AND key = ?");
    s.bind(1, job).bind(2, key);
    if (s.step()) {
      if (s.text(0) != text)
        throw Conflict("parameter '" + key + "' of job " + std::to_string(job) + " is already '" + s.text(0) +
                       "'; parameters are written once (log a metric for values that change)");
      continue;
    }
    Statement(db_, "INSERT INTO run_params (job_id, key, value) VALUES (?, ?, ?)").bind(1, job).bind(2, key).bind(3, text).run();
  }
  t.commit();
}

void Runs::log_metrics(int64_t job, const json& body) {
  KILN_CHECK(body.is_object() && body.contains("metrics") && body["metrics"].is_array(),
             "metrics are {\"metrics\": [{\"key\": ..., \"step\": ..., \"value\": ...}, ...]}");
  Transaction t(db_);
  for (const auto& p : body["metrics"]) {
    KILN_CHECK(p.is_object() && p.contains("key") && p["key"].is_string() && p.contains("value") && p["value"].is_number(),
               "every metric point needs a \"key\" (string) and a \"value\" (number)");
    std::string key = p["key"];
    KILN_CHECK(!key.empty() && key.size() <= 250, "a metric name has 1 to 250 characters");
    const int64_t step = p.contains("step") && p["step"].is_number_integer() ? p["step"].get<int64_t>() : 0;
    const int64_t at = p.contains("at_ms") && p["at_ms"].is_number_integer() ? p["at_ms"].get<int64_t>() : now_ms();
    Statement(db_, "INSERT INTO run_metrics (job_id, key, step, value, at_ms) VALUES (?, ?, ?, ?, ?)")
        .bind(1, job).bind(2, key).bind(3, step).bind(4, p["value"].get<double>()).bind(5, at)
        .run();
  }
  t.commit();
}

json Runs::params(int64_t job) {
  Statement s(db_, "SELECT key, value FROM run_params WHERE job_id = ? ORDER BY key");
  s.bind(1, job);
  json out = json::object();
  while (s.step()) out[s.text(0)] = s.text(1);
  return {{"params", out}};
}

void Runs::set_tags(int64_t job, const json& body) {
  KILN_CHECK(body.is_object() && body.contains("tags") && body["tags"].is_object(),
             "tags are {\"tags\": {\"name\": \"value\", \"removed\": null, ...}}");
  Transaction t(db_);
  for (auto& [key, value] : body["tags"].items()) {
    KILN_CHECK(!key.empty() && key.size() <= 250, "a tag name has 1 to 250 characters");
    if (value.is_null()) {
      Statement(db_, "DELETE FROM run_tags WHERE job_id = ? AND key = ?").bind(1, job).bind(2, key).run();
      continue;
    }
    const std::string text = value.is_string() ? value.get<std::string>() : value.dump();
    Statement(db_, "INSERT INTO run_tags (job_id, key, value) VALUES (?, ?, ?) "
                   "ON CONFLICT (job_id, key) DO UPDATE SET value = excluded.value")
        .bind(1, job).bind(2, key).bind(3, text)
        .run();
  }
  t.commit();
}

json Runs::tags(int64_t job) {
  Statement s(db_, "SELECT key, value FROM run_tags WHERE job_id = ? ORDER BY key");
  s.bind(1, job);
  json out = json::object();
  while (s.step()) out[s.text(0)] = s.text(1);
  return out;
}

bool Runs::has_tag(int64_t job, const std::string& key, const std::string& value) {
  Statement s(db_, "SELECT 1 FROM run_tags WHERE job_id = ? AND key = ? AND value = ?");
  s.bind(1, job).bind(2, key).bind(3, value);
  return s.step();
}

json Runs::final_metrics(int64_t job) {
  Statement s(db_, "SELECT m.key, m.value FROM run_metrics m WHERE m.job_id = ? AND m.step = "
                   "(SELECT MAX(step) FROM run_metrics WHERE job_id = m.job_id AND key = m.key) ORDER BY m.key, " +
                       std::string(db_.insertion_order()));
  s.bind(1, job);
  json out = json::object();
  while (s.step()) out[s.text(0)] = s.real(1);  // the last written of the last step
  return out;
}

json Runs::metrics(int64_t job, const std::string& key) {
  const std::string order = db_.insertion_order();
  Statement s(db_, key.empty() ? "SELECT key, step, value, at_ms FROM run_metrics WHERE job_id = ? ORDER BY key, step, " + order
                               : "SELECT key, step, value, at_ms FROM run_metrics WHERE job_id = ? AND key = ? "
                                 "ORDER BY step, " + order);
  s.bind(1, job);
  if (!key.empty()) s.bind(2, key);
  json out = json::object();
  while (s.step()) out[s.text(0)].push_back({s.integer(1), s.real(2), s.integer(3)});
  return {{"metrics", out}};
}

}  // namespace kiln::studio

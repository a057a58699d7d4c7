#pragma once
// Run tracking: each job is a run with parameters (each written once; the
// same value again is fine, another one is refused), metrics appended with
// their step and time, and tags that change at any time.
#include <nlohmann/json.hpp>

#include "kiln/error.h"
#include "studio/database.h"

namespace kiln::studio {

class Runs {
 public:
  explicit Runs(Database& db) : db_(db) {}
  // {"params": {"key": "value", ...}}
  void log_params(int64_t job, const nlohmann::json& body);
  // {"metrics": [{"key": ..., "step": ..., "value": ..., "at_ms": ...}, ...]}
  void log_metrics(int64_t job, const nlohmann::json& body);
  nlohmann::json params(int64_t job);
  // {"tags": {"key": "value", "gone": null}}: tags change at any time; null removes one.
  void set_tags(int64_t job, const nlohmann::json& body);
  // {"key": "value", ...}
  nlohmann::json tags(int64_t job);
  // Whether a job has tag key=value.
  bool has_tag(int64_t job, const std::string& key, const std::string& value);
  // {"metrics": {"loss": [[step, value, at_ms], ...], ...}}, one key or all.
  nlohmann::json metrics(int64_t job, const std::string& key);
  // {"loss": value, ...}: each metric's value at its last step.
  nlohmann::json final_metrics(int64_t job);

 private:
  Database& db_;
};

// Thrown when a parameter already has another value (HTTP 409).
class Conflict : public Error {
 public:
  using Error::Error;
};

}  // namespace kiln::studio

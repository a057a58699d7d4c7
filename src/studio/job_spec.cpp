#include "studio/job_spec.h"

#include <cctype>
#include <cstdio>

#include "kiln/error.h"
#include "studio/models.h"
#include "studio/object_store.h"

namespace kiln::studio {

using json = nlohmann::json;

std::pair<std::string, std::string> split_store_url(const std::string& url, const std::string& what) {
  KILN_CHECK(url.rfind("studio://", 0) == 0, what, ": '", url, "' is not a store URL (studio://BUCKET/PREFIX)");
  std::string rest = url.substr(9);
  size_t slash = rest.find('/');
  std::string bucket = rest.substr(0, slash), prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
  check_bucket_name(bucket);
  if (!prefix.empty()) check_key(prefix.back() == '/' ? prefix.substr(0, prefix.size() - 1) : prefix);
  return {bucket, prefix};
}

namespace {

std::string string_at(const json& j, const std::string& key) {
  KILN_CHECK(j.is_string(), "job spec: '", key, "' must be a string, not ", j.type_name());
  return j.get<std::string>();
}

std::map<std::string, std::string> strings_map(const json& j, const std::string& key) {
  KILN_CHECK(j.is_object(), "job spec: '", key, "' must be a mapping of names to strings");
  std::map<std::string, std::string> out;
  for (auto& [k, v] : j.items()) out[k] = string_at(v, key + "." + k);
  return out;
}

double number_at(const json& j, const std::string& key, double low, double high) {
  KILN_CHECK(j.is_number(), "job spec: '", key, "' must be a number, not ", j.type_name());
  double v = j.get<double>();
  KILN_CHECK(v >= low && v <= high, "job spec: '", key, "' must be in [", low, ", ", high, "], got ", v);
  return v;
}

}  // namespace

bool valid_env_name(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

Resources parse_flavour(const std::string& flavour) {
  int n = 0;
  char kind[4] = {};
  const bool named = std::sscanf(flavour.c_str(), "%3[a-z]-%d", kind, &n) == 2 && n >= 1 && n <= 1024 &&
                     flavour == std::string(kind) + "-" + std::to_string(n) &&
                     (std::string(kind) == "cpu" || (std::string(kind) == "gpu" && n <= 64));
  KILN_CHECK(named, "'", flavour, "' is not a flavour: the studio offers cpu-N (N CPU cores, 4 GB of memory each) and "
             "gpu-N (N GPUs, each with 8 cores and 32 GB), or give {cpus, memory_mb, gpus}");
  Resources r;
  if (std::string(kind) == "cpu") r.cpus = n, r.memory_mb = 4096LL * n;
  else r.gpus = n, r.cpus = 8 * n, r.memory_mb = 32768LL * n;
  return r;
}

Resources parse_resources(const json& r, const std::string& what) {
  if (r.is_string()) return parse_flavour(r.get<std::string>());
  KILN_CHECK(r.is_object(), what, " is a flavour (cpu-2, gpu-1) or a mapping of cpus, memory_mb and gpus");
  for (auto& [key, value] : r.items())
    KILN_CHECK(key == "cpus" || key == "memory_mb" || key == "gpus", what, ": unknown key '", key,
               "'; the keys are cpus, memory_mb and gpus");
  Resources out;
  if (r.contains("cpus")) out.cpus = static_cast<int>(number_at(r["cpus"], "resources.cpus", 1, 1024));
  if (r.contains("memory_mb"))
    out.memory_mb = static_cast<int64_t>(number_at(r["memory_mb"], "resources.memory_mb", 1, 1e9));
  if (r.contains("gpus")) out.gpus = static_cast<int>(number_at(r["gpus"], "resources.gpus", 0, 64));
  return out;
}

JobSpec parse_job_spec(const json& j) {
  KILN_CHECK(j.is_object(), "a job spec is a mapping (YAML or a JSON object)");
  static const char* known[] = {"name", "recipe", "command", "code", "inputs", "output", "nproc", "nnodes", "env",
                                "time_limit_s", "sync_every_s", "resources", "priority", "project", "secrets"};
  for (auto& [key, value] : j.items()) {
    bool ok = false;
    for (const char* k : known) ok = ok || key == k;
    KILN_CHECK(ok, "job spec: unknown key '", key,
               "'; the keys are name, recipe or command, code, inputs, output, nproc, nnodes, env, time_limit_s, "
               "sync_every_s, resources, priority, project, secrets");
  }
  JobSpec s;
  KILN_CHECK(j.contains("name"), "job spec: 'name' is required");
  s.name = string_at(j["name"], "name");
  KILN_CHECK(!s.name.empty() && s.name.size() <= 100, "job spec: 'name' must have 1 to 100 characters");
  KILN_CHECK(j.contains("recipe") != j.contains("command"), "job spec: give either 'recipe' (a recipe YAML) or "
             "'command' (a list: the program and its arguments), not both or neither");
  if (j.contains("recipe")) s.recipe = string_at(j["recipe"], "recipe");
  if (j.contains("command")) {
    const json& c = j["command"];
    KILN_CHECK(c.is_array() && !c.empty(), "job spec: 'command' must be a non-empty list of strings");
    for (size_t i = 0; i < c.size(); ++i) s.command.push_back(string_at(c[i], "command[" + std::to_string(i) + "]"));
  }
  if (j.contains("inputs")) {
    s.inputs = strings_map(j["inputs"], "inputs");
    for (auto& [name, url] : s.inputs) {
      KILN_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..",
                 "job spec: input name '", name, "' must be a plain name (it becomes a folder)");
      split_store_url(url, "inputs." + name);
    }
  }
  if (j.contains("code")) {
    s.code = string_at(j["code"], "code");
    split_store_url(s.code, "code");
  }
  if (j.contains("output")) {
    s.output = string_at(j["output"], "output");
    split_store_url(s.output, "output");
  }
  if (j.contains("nproc")) s.nproc = static_cast<int>(number_at(j["nproc"], "nproc", 1, 64));
  if (j.contains("nnodes")) s.nnodes = static_cast<int>(number_at(j["nnodes"], "nnodes", 1, 256));
  if (j.contains("env")) s.env = strings_map(j["env"], "env");
  if (j.contains("time_limit_s")) s.time_limit_s = number_at(j["time_limit_s"], "time_limit_s", 0, 1e7);
  if (j.contains("sync_every_s")) s.sync_every_s = number_at(j["sync_every_s"], "sync_every_s", 1, 86400);
  if (j.contains("resources")) s.resources = parse_resources(j["resources"], "job spec: resources");
  if (j.contains("priority")) s.priority = static_cast<int>(number_at(j["priority"], "priority", -100, 100));
  if (j.contains("project")) {
    s.project = string_at(j["project"], "project");
    check_model_name(s.project, "job spec: project");
  }
  if (j.contains("secrets")) {
    KILN_CHECK(j["secrets"].is_array(), "job spec: 'secrets' is a list of the project's secret names");
    for (const auto& name : j["secrets"]) {
      s.secrets.push_back(string_at(name, "secrets"));
      KILN_CHECK(valid_env_name(s.secrets.back()), "job spec: secret '", s.secrets.back(),
                 "' is not an environment variable's name (letters, digits and '_', not starting with a digit)");
    }
  }
  return s;
}

json job_spec_json(const JobSpec& s) {
  json j = {{"name", s.name}, {"nproc", s.nproc}, {"nnodes", s.nnodes}, {"env", s.env}, {"inputs", s.inputs},
            {"time_limit_s", s.time_limit_s}, {"sync_every_s", s.sync_every_s}};
  if (!s.recipe.empty()) j["recipe"] = s.recipe;
  if (!s.command.empty()) j["command"] = s.command;
  if (!s.output.empty()) j["output"] = s.output;
  if (!s.code.empty()) j["code"] = s.code;
  j["resources"] = {{"cpus", s.cores()}, {"gpus", s.resources.gpus}};
  if (s.resources.memory_mb > 0) j["resources"]["memory_mb"] = s.resources.memory_mb;
  j["priority"] = s.priority;
  j["project"] = s.project;
  if (!s.secrets.empty()) j["secrets"] = s.secrets;
  return j;
}

}  // namespace kiln::studio

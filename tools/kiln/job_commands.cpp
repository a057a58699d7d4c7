// `kiln job submit | list | show | stop | logs`: training jobs in a studio.
#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "kiln/error.h"
#include "studio_client.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// YAML to JSON: the numeric keys of a spec become numbers, every other
// scalar stays text ("2" in a command is an argument, not a number).
json from_yaml(const YAML::Node& node, const std::string& key) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : node) out[kv.first.as<std::string>()] = from_yaml(kv.second, kv.first.as<std::string>());
      return out;
    }
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : node) out.push_back(from_yaml(item, key));
      return out;
    }
    case YAML::NodeType::Scalar:
      if (key == "nproc" || key == "nnodes" || key == "time_limit_s" || key == "sync_every_s") {
        try {
          return node.as<double>();
        } catch (const YAML::Exception&) {
          KILN_FAIL("job spec: '", key, "' must be a number, not '", node.as<std::string>(), "'");
        }
      }
      return node.as<std::string>();
    default:
      return nullptr;
  }
}

// Uploads the spec's code_dir to the store and names it there instead
// (`code`), so the job runs the code as it was at submission.
void upload_code(Remote& remote, json& spec) {
  if (!spec.is_object() || !spec.contains("code_dir")) return;
  KILN_CHECK(spec["code_dir"].is_string(), "job spec: 'code_dir' must be a folder");
  std::string dir = spec["code_dir"];
  KILN_CHECK(fs::is_directory(dir), "job spec: code_dir ", dir, " is not a folder");
  const std::string name = spec.value("name", std::string("job"));
  std::string slug;
  for (char c : name) slug += std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(c)) : '-';
  const std::string prefix = "code/" + slug + "-" +
                             std::to_string(std::chrono::system_clock::now().time_since_epoch().count()) + "/";
  // The code goes to a bucket of the job's project.
  const std::string project = spec.value("project", std::string("default"));
  const std::string bucket = project == "default" ? "studio-jobs" : project + "-jobs";
  remote.make_bucket(bucket, project);
  int files = 0;
  for (auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    remote.upload(entry.path().string(), {bucket, prefix + fs::relative(entry.path(), dir).generic_string()});
    ++files;
  }
  KILN_CHECK(files > 0, "job spec: code_dir ", dir, " holds no files");
  spec.erase("code_dir");
  spec["code"] = "studio://" + bucket + "/" + prefix;
}

json read_spec(const std::string& path) {
  KILN_CHECK(fs::exists(path), "no job spec file ", path);
  json spec;
  try {
    spec = from_yaml(YAML::LoadFile(path), "");  // JSON is YAML too
  } catch (const YAML::Exception& e) {
    KILN_FAIL("job spec ", path, " is not valid YAML: ", e.what());
  }
  // A recipe outside the job's code is read where the job runs: give its absolute path.
  if (spec.is_object() && spec.contains("code_dir") && spec["code_dir"].is_string()) {
    fs::path code = spec["code_dir"].get<std::string>();
    if (code.is_relative()) spec["code_dir"] = fs::absolute(fs::path(path).parent_path() / code).string();
  } else if (spec.is_object() && spec.contains("recipe") && spec["recipe"].is_string()) {
    fs::path recipe = spec["recipe"].get<std::string>();
    if (recipe.is_relative()) {
      fs::path beside = fs::path(path).parent_path() / recipe;
      recipe = fs::exists(recipe) ? fs::absolute(recipe) : fs::absolute(beside);
    }
    KILN_CHECK(fs::exists(recipe), "job spec: recipe ", spec["recipe"].get<std::string>(), " does not exist");
    spec["recipe"] = recipe.string();
  }
  return spec;
}

void print_job(const json& j) {
  std::printf("job %lld  %s\n", j["id"].get<long long>(), j["name"].get<std::string>().c_str());
  std::printf("  state   %s (%s)\n", j["state"].get<std::string>().c_str(), j["stage"].get<std::string>().c_str());
  if (!j["reason"].get<std::string>().empty()) std::printf("  reason  %s\n", j["reason"].get<std::string>().c_str());
  if (!j["exit_code"].is_null()) std::printf("  exit    %d\n", j["exit_code"].get<int>());
  if (j.contains("stage_times") && !j["stage_times"].empty()) {
    // Stages in the order entered, each with how long it took.
    std::vector<std::pair<int64_t, std::string>> stages;
    for (auto& [stage, at] : j["stage_times"].items()) stages.emplace_back(at.get<int64_t>(), stage);
    std::sort(stages.begin(), stages.end());
    std::string line;
    for (size_t i = 0; i < stages.size(); ++i) {
      line += (i ? ", " : "") + stages[i].second;
      if (i + 1 < stages.size()) {
        char took[32];
        std::snprintf(took, sizeof took, " %.1f s", (stages[i + 1].first - stages[i].first) / 1000.0);
        line += took;
      }
    }
    std::printf("  stages  %s\n", line.c_str());
  }
  if (j.value("executor", "local") == "slurm" && j.contains("external_id"))
    std::printf("  slurm   job %s\n", j["external_id"].get<std::string>().c_str());
  auto seconds = [&](const char* a, const char* b) {
    return (j[b].get<int64_t>() - j[a].get<int64_t>()) / 1000.0;
  };
  if (j["started_ms"].get<int64_t>() > 0 && j["ended_ms"].get<int64_t>() > 0)
    std::printf("  ran     %.1f s\n", seconds("started_ms", "ended_ms"));
  if (j.contains("tags"))
    for (auto& [k, v] : j["tags"].items()) std::printf("  tag     %s = %s\n", k.c_str(), v.get<std::string>().c_str());
  std::printf("  spec    %s\n", j["spec"].dump().c_str());
}

bool finished(const std::string& state) {
  return state == "Completed" || state == "Failed" || state == "Terminated" || state == "Abnormal";
}

}  // namespace

void add_job_commands(CLI::App& app) {
  auto* job = app.add_subcommand("job", "Training jobs in a studio: submit, list, show, stop, retry, logs, metrics, tag");
  job->require_subcommand(1);
  auto server = std::make_shared<std::string>();
  auto token = std::make_shared<std::string>();
  auto arg = std::make_shared<std::string>();
  auto wait = std::make_shared<bool>(false);
  auto rank = std::make_shared<int>(-1);
  auto grep = std::make_shared<std::string>();
  auto follow = std::make_shared<bool>(false);

  auto* submit = job->add_subcommand("submit", "Submit a job spec (YAML or JSON); prints the job id");
  submit->add_option("spec", *arg, "The job spec file")->required();
  submit->add_flag("--wait", *wait, "Wait for the job to end; exit 0 only if it completed");
  auto project = std::make_shared<std::string>();
  submit->add_option("--project", *project, "The project it runs in (default: the spec's project:, or default)");
  submit->callback([=] {
    Remote remote(*server, *token);
    json spec = read_spec(*arg);
    if (!project->empty() && spec.is_object()) spec["project"] = *project;
    upload_code(remote, spec);
    int64_t id = remote.post_json("/api/v1/jobs", spec, 201)["id"];
    std::printf("%lld\n", static_cast<long long>(id));
    std::fflush(stdout);
    if (!*wait) return;
    json j;
    do {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      j = remote.get_json("/api/v1/jobs/" + std::to_string(id));
    } while (!finished(j["state"]));
    print_job(j);
    if (j["state"] != "Completed") throw CLI::RuntimeError(1);
  });

  auto tag = std::make_shared<std::string>();
  auto* list = job->add_subcommand("list", "The latest jobs, newest first");
  list->add_option("--tag", *tag, "Only jobs tagged KEY=VALUE");
  list->callback([=] {
    json jobs = Remote(*server, *token).get_json("/api/v1/jobs" + (tag->empty() ? "" : "?tag=" + encode(*tag, false)));
    for (auto& j : jobs["jobs"])
      std::printf("%6lld  %-11s %-24s %s\n", j["id"].get<long long>(), j["state"].get<std::string>().c_str(),
                  j["name"].get<std::string>().c_str(), j["reason"].get<std::string>().c_str());
  });

  auto* show = job->add_subcommand("show", "A job's state, stage, reason, times and spec");
  show->add_option("id", *arg, "Job id")->required();
  show->callback([=] { print_job(Remote(*server, *token).get_json("/api/v1/jobs/" + encode(*arg, false))); });

  auto* stop = job->add_subcommand("stop", "Stop a running job (Terminating, then Terminated)");
  stop->add_option("id", *arg, "Job id")->required();
  stop->callback([=] {
    Remote(*server, *token).post_json("/api/v1/jobs/" + encode(*arg, false) + "/stop", json::object(), 202);
    std::printf("stopping job %s\n", arg->c_str());
  });

  auto* logs = job->add_subcommand("logs", "A job's per-rank logs, merged in time order");
  logs->add_option("id", *arg, "Job id")->required();
  logs->add_option("--rank", *rank, "Only this rank's lines");
  logs->add_option("--grep", *grep, "Only lines matching this word or regular expression");
  logs->add_flag("-f,--follow", *follow, "Keep printing new lines until the job ends");
  logs->callback([=] {
    Remote remote(*server, *token);
    std::string base = "/api/v1/jobs/" + encode(*arg, false) + "/logs?grep=" + encode(*grep, false) +
                       (*rank >= 0 ? "&rank=" + std::to_string(*rank) : "");
    auto print = [](const json& l) {
      std::printf("[rank %d] %s\n", l["rank"].get<int>(), l["text"].get<std::string>().c_str());
    };
    if (*follow) {  // server-sent events until the job ends
      remote.follow_events(base + "&follow=true", [&](const std::string& event, const std::string& data) {
        if (event == "line") print(json::parse(data));
        std::fflush(stdout);
        return event != "end";
      });
      return;
    }
    for (int64_t shown = 0;;) {
      json page = remote.get_json(base + "&from_line=" + std::to_string(shown) + "&lines=10000");
      for (auto& l : page["lines"]) print(l);
      shown += static_cast<int64_t>(page["lines"].size());
      if (page["lines"].empty() || shown >= page["total"].get<int64_t>()) break;
    }
  });

  auto* retry = job->add_subcommand("retry", "Submit a job's spec again (its code as it was); prints the new id");
  retry->add_option("id", *arg, "Job id")->required();
  retry->callback([=] {
    json r = Remote(*server, *token).post_json("/api/v1/jobs/" + encode(*arg, false) + "/retry", json::object(), 201);
    std::printf("%lld\n", r["id"].get<long long>());
  });

  auto tags = std::make_shared<std::vector<std::string>>();
  auto removed = std::make_shared<std::vector<std::string>>();
  auto* tagging = job->add_subcommand("tag", "Set (KEY=VALUE) or remove (--remove KEY) a job's tags");
  tagging->add_option("id", *arg, "Job id")->required();
  tagging->add_option("tags", *tags, "KEY=VALUE ...");
  tagging->add_option("--remove", *removed, "A tag to remove");
  tagging->callback([=] {
    json body = {{"tags", json::object()}};
    for (const auto& t : *tags) {
      size_t eq = t.find('=');
      KILN_CHECK(eq != std::string::npos && eq > 0, "a tag is KEY=VALUE, not '", t, "'");
      body["tags"][t.substr(0, eq)] = t.substr(eq + 1);
    }
    for (const auto& k : *removed) body["tags"][k] = nullptr;
    json now = Remote(*server, *token).send("PATCH", "/api/v1/jobs/" + encode(*arg, false) + "/tags", body.dump(),
                                            "application/json", 200)["tags"];
    for (auto& [k, v] : now.items()) std::printf("%s = %s\n", k.c_str(), v.get<std::string>().c_str());
  });

  auto* metrics = job->add_subcommand("metrics", "A job's parameters and metrics (run tracking)");
  metrics->add_option("id", *arg, "Job id")->required();
  metrics->callback([=] {
    Remote remote(*server, *token);
    json params = remote.get_json("/api/v1/jobs/" + encode(*arg, false) + "/params")["params"];
    for (auto& [k, v] : params.items()) std::printf("param   %-24s %s\n", k.c_str(), v.get<std::string>().c_str());
    json series = remote.get_json("/api/v1/jobs/" + encode(*arg, false) + "/metrics")["metrics"];
    if (series.empty()) std::printf("no metrics yet\n");
    for (auto& [k, points] : series.items()) {
      const json& last = points.back();
      double low = last[1], high = last[1];
      for (auto& p : points) low = std::min(low, p[1].get<double>()), high = std::max(high, p[1].get<double>());
      std::printf("metric  %-24s last %-12g at step %-8lld (%zu points, min %g, max %g)\n", k.c_str(),
                  last[1].get<double>(), last[0].get<long long>(), points.size(), low, high);
    }
  });

  for (auto* sub : {submit, list, show, stop, logs, retry, metrics, tagging}) {
    sub->add_option("--server", *server, "Studio URL (default: KILN_STUDIO_URL, or http://127.0.0.1:8080)");
    sub->add_option("--token", *token, "API token (default: KILN_STUDIO_TOKEN)");
  }
}

}  // namespace kiln::cli

#include "studio/models.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include "core/child_process.h"
#include "kiln/data/readers.h"
#include "kiln/recipe.h"
#include "kiln/runtime.h"
#include "studio/tokens.h"

namespace kiln::studio {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char* const kBucket = "studio-models";

json info_json(const TensorInfo& t) {
  json shape = json::array();
  for (size_t d = 0; d < t.shape.size(); ++d) {
    const bool named = d < t.dim_names.size() && !t.dim_names[d].empty();
    if (named) shape.push_back(t.dim_names[d]);
    else shape.push_back(t.shape[d]);
  }
  return {{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.shape_known ? shape : json(nullptr)}};
}

// An input for the load check: dynamic dimensions 1, zeros of its dtype.
Tensor sample_of(const TensorInfo& t) {
  Shape shape = t.shape;
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] <= 0 || (d < t.dim_names.size() && !t.dim_names[d].empty())) shape[d] = 1;
  return zeros(shape, t.dtype);
}

// The sample shape a recipe's model is exported with, from its dataset.
std::vector<int64_t> default_input_shape(const recipe::Recipe& r, int64_t job) {
  if (r.dataset == "fashion_mnist" || r.dataset == "mnist") return {1, 1, 28, 28};
  if (r.dataset == "cifar10") return {1, 3, 32, 32};
  KILN_FAIL("job ", job, " trained on dataset '", r.dataset,
            "', whose input shape the studio cannot tell; register it with \"input_shape\" (--input-shape)");
}

// Runs the kiln executable with `args`, its output to `log`; returns its exit status.
int run_kiln(const std::string& kiln, std::vector<std::string> args, const std::string& log) {
  args.insert(args.begin(), kiln);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  KILN_CHECK(pid >= 0, "cannot start kiln: fork failed");
  if (pid == 0) {
    kiln::detail::reset_signals_for_exec();
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

ModelVersion row_to_version(Statement& s) {
  ModelVersion v;
  v.model = s.text(0);
  v.version = s.integer(1);
  v.state = s.text(2);
  v.reason = s.text(3);
  v.source = s.text(4);
  v.job_id = s.is_null(5) ? 0 : s.integer(5);
  v.file_key = s.text(6);
  v.sha256 = s.text(7);
  v.size = s.integer(8);
  v.signature = json::parse(s.text(9));
  v.lineage = json::parse(s.text(10));
  v.description = s.text(11);
  v.tags = json::parse(s.text(12));
  v.created_by = s.text(13);
  v.created_ms = s.integer(14);
  return v;
}

const char* const kVersionColumns =
    "model, version, state, reason, source, job_id, file_key, sha256, size, signature, lineage, description, tags, "
    "created_by, created_at";

}  // namespace

void check_model_name(const std::string& name, const char* what) {
  KILN_CHECK(std::regex_match(name, std::regex("[a-z0-9][a-z0-9_-]{0,63}")), what, " '", name,
             "' is not a valid name: 1 to 64 characters of a-z, 0-9, '-' and '_', starting with a letter or digit");
}

json ModelVersion::json() const {
  return {{"model", model},        {"version", version},         {"state", state},
          {"reason", reason},      {"source", source},           {"job", job_id ? nlohmann::json(job_id) : nullptr},
          {"sha256", sha256},      {"size", size},               {"signature", signature},
          {"lineage", lineage},    {"description", description}, {"tags", tags},
          {"created_by", created_by}, {"created_ms", created_ms}, {"aliases", aliases},
          {"uri", "models:/" + model + "/" + std::to_string(version)}};
}

Models::Models(Database& db, ObjectStore& store, Jobs& jobs, Runs& runs, std::string kiln, std::string work_dir)
    : db_(db), store_(store), jobs_(jobs), runs_(runs), kiln_(std::move(kiln)), work_dir_(std::move(work_dir)) {
  fs::create_directories(work_dir_);
  // Checks that a stopped studio left unfinished are not running any more.
  Statement(db_, "UPDATE model_versions SET state = 'FAILED', reason = 'the studio stopped during its check; "
                 "register it again' WHERE state = 'PENDING'")
      .run();
}

Models::~Models() { wait_for_checks(); }

void Models::wait_for_checks() {
  std::vector<Check> running;
  {
    std::lock_guard<std::mutex> lock(mu_);
    running.swap(checks_);
  }
  for (auto& c : running) c.thread.join();
}

ModelVersion Models::register_version(const std::string& name, RegisterRequest request, const std::string& by) {
  check_model_name(name, "model name");
  const int sources = (request.job ? 1 : 0) + (request.url.empty() ? 0 : 1) + (request.bytes.empty() ? 0 : 1);
  KILN_CHECK(sources == 1, "a model version comes from one of: \"job\" (a completed job's id), \"url\" "
                           "(studio://bucket/key.onnx) or an ONNX file as the request body");
  KILN_CHECK(request.tags.is_object(), "\"tags\" must be an object of names to values");
  std::string source = "upload";
  if (request.job) {
    auto job = jobs_.get(request.job);
    if (!job) throw NotFound("no job " + std::to_string(request.job));
    if (job->state != "Completed")
      throw Conflict("job " + std::to_string(request.job) + " is " + job->state +
                     "; a model is registered from a job that has Completed");
    source = "job " + std::to_string(request.job);
  } else if (!request.url.empty()) {
    auto [bucket, key] = split_store_url(request.url, "url");
    if (!store_.stat(bucket, key)) throw NotFound("no object " + request.url + " in the store");
    source = request.url;
  }
  int64_t version = 0;
  {
    Transaction t(db_);
    {
      Statement known(db_, "SELECT 1 FROM projects WHERE name = ?");
      known.bind(1, request.project);
      KILN_CHECK(known.step(), "no project '", request.project, "'");
    }
    Statement(db_, "INSERT INTO models (name, description, created_at, project) VALUES (?, '', ?, ?) "
                   "ON CONFLICT DO NOTHING")
        .bind(1, name).bind(2, now_ms()).bind(3, request.project)
        .run();
    Statement next(db_, "SELECT COALESCE(MAX(version), 0) + 1 FROM model_versions WHERE model = ?");
    next.bind(1, name);
    next.step();
    version = next.integer(0);
    Statement insert(db_, "INSERT INTO model_versions (model, version, state, reason, source, job_id, file_key, sha256, size, "
                   "signature, lineage, description, tags, created_by, created_at) "
                   "VALUES (?, ?, 'PENDING', '', ?, ?, ?, '', 0, 'null', '{}', ?, ?, ?, ?)");
    insert.bind(1, name).bind(2, version).bind(3, source)
        .bind(5, name + "/" + std::to_string(version) + "/model.onnx").bind(6, request.description)
        .bind(7, request.tags.dump()).bind(8, by).bind(9, now_ms());
    if (request.job) insert.bind(4, request.job);
    else insert.bind_null(4);
    insert.run();
    t.commit();
  }
  ModelVersion created = *find(name, version);  // PENDING, whatever the check does next
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = checks_.begin(); it != checks_.end();) {
    if (*it->done) {
      it->thread.join();
      it = checks_.erase(it);
    } else {
      ++it;
    }
  }
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread t([this, name, version, done, request = std::move(request)]() mutable {
    check(name, version, std::move(request));
    *done = true;
  });
  checks_.push_back({std::move(t), done});
  return created;
}

std::string Models::export_job(int64_t job, const std::vector<int64_t>& input_shape, json& lineage) {
  auto record = jobs_.get(job);
  const std::string checkpoint = jobs_.folder(job) + "/output/checkpoint.safetensors";
  KILN_CHECK(fs::exists(checkpoint), "job ", job, " left no checkpoint.safetensors in its output; register a job "
             "that ran a recipe, or the ONNX file a command job wrote (\"url\")");
  recipe::Recipe r = recipe::recipe_of_checkpoint(checkpoint);
  std::vector<int64_t> shape = input_shape.empty() ? default_input_shape(r, job) : input_shape;
  std::string shape_text;
  for (int64_t d : shape) shape_text += detail::concat(shape_text.empty() ? "" : ",", d);
  const std::string base = work_dir_ + "/export-" + std::to_string(job) + "-" + std::to_string(now_ms());
  { std::ofstream(base + ".yaml") << r.text; }
  const int status = run_kiln(kiln_, {"export", "--recipe", base + ".yaml", "--checkpoint", checkpoint,
                                      "--input-shape", shape_text, "--dynamic-batch", "--out", base + ".onnx"},
                              base + ".log");
  std::string log = read_text(base + ".log");
  fs::remove(base + ".yaml");
  fs::remove(base + ".log");
  KILN_CHECK(status == 0, "exporting job ", job, "'s checkpoint failed: ", log);
  std::string bytes = read_text(base + ".onnx");
  fs::remove(base + ".onnx");

  lineage["job"] = job;
  lineage["recipe"] = r.text;
  json data = json::object();
  for (const auto& [k, v] : record->spec.inputs) data[k] = v;
  lineage["data"] = data;
  lineage["output"] = record->spec.output;
  json metrics = json::object();
  try {
    metrics = json::parse(read_text(jobs_.folder(job) + "/output/metrics.json"));
  } catch (const std::exception&) {
  }
  lineage["metrics"] = metrics;
  json tracked = json::object();  // the last value of each metric the run sent
  const json series = runs_.metrics(job, "")["metrics"];
  for (auto& [key, points] : series.items()) tracked[key] = points.back()[1];
  lineage["tracked_metrics"] = tracked;
  return bytes;
}

void Models::check(std::string name, int64_t version, RegisterRequest request) {
  json lineage = json::object();
  try {
    std::string bytes;
    if (request.job) {
      bytes = export_job(request.job, request.input_shape, lineage);
    } else if (!request.url.empty()) {
      auto [bucket, key] = split_store_url(request.url, "url");
      auto info = store_.stat(bucket, key);
      if (!info) throw NotFound("no object " + request.url + " in the store");
      bytes = store_.read(bucket, *info);
      lineage["url"] = request.url;
    } else {
      bytes.swap(request.bytes);
    }
    const std::vector<std::string> buckets = store_.buckets();
    if (std::find(buckets.begin(), buckets.end(), kBucket) == buckets.end()) {
      try {
        store_.create_bucket(kBucket);
      } catch (const Error&) {  // created meanwhile by another check
      }
    }
    const std::string key = name + "/" + std::to_string(version) + "/model.onnx";
    ObjectInfo stored = store_.put(kBucket, key, bytes);
    Statement(db_, "UPDATE model_versions SET sha256 = ?, size = ? WHERE model = ? AND version = ?")
        .bind(1, stored.sha256).bind(2, stored.size).bind(3, name).bind(4, version)
        .run();

    // The signature comes from the graph itself, and the version must load and run.
    InferenceSession session = InferenceSession::from_bytes(bytes, {}, name + " version " + std::to_string(version));
    json signature = {{"inputs", json::array()}, {"outputs", json::array()}};
    std::vector<Tensor> sample;
    for (const auto& in : session.inputs()) {
      signature["inputs"].push_back(info_json(in));
      sample.push_back(sample_of(in));
    }
    for (const auto& out : session.outputs()) signature["outputs"].push_back(info_json(out));
    auto meta = session.metadata();
    if (!lineage.contains("recipe") && meta.count("kiln.recipe")) lineage["recipe"] = meta.at("kiln.recipe");
    // A model of a built-in dataset's classes: their names, for answers a person reads.
    if (lineage.contains("recipe") && lineage["recipe"].is_string()) {
      try {
        const auto names = data::dataset_class_names(recipe::parse_recipe_text(lineage["recipe"]).dataset);
        if (!names.empty()) signature["labels"] = names;
      } catch (const std::exception&) {  // a recipe this build cannot read: no names
      }
    }
    try {
      session.run(sample);
    } catch (const std::exception& e) {
      finish(name, version, "FAILED", std::string("it loads but does not run on a sample of zeros: ") + e.what(),
             signature, lineage);
      return;
    }
    finish(name, version, "READY", "", signature, lineage);
  } catch (const std::exception& e) {
    finish(name, version, "FAILED", e.what(), nullptr, lineage);
  }
}

void Models::finish(const std::string& name, int64_t version, const std::string& state, const std::string& reason,
                    const json& signature, const json& lineage) {
  Statement(db_, "UPDATE model_versions SET state = ?, reason = ?, signature = ?, lineage = ? "
                 "WHERE model = ? AND version = ?")
      .bind(1, state).bind(2, reason).bind(3, signature.dump()).bind(4, lineage.is_null() ? "{}" : lineage.dump())
      .bind(5, name).bind(6, version)
      .run();
}

std::optional<ModelVersion> Models::find(const std::string& name, int64_t version) {
  Statement s(db_, std::string("SELECT ") + kVersionColumns + " FROM model_versions WHERE model = ? AND version = ?");
  s.bind(1, name).bind(2, version);
  if (!s.step()) return std::nullopt;
  ModelVersion v = row_to_version(s);
  Statement a(db_, "SELECT alias FROM model_aliases WHERE model = ? AND version = ? ORDER BY alias");
  a.bind(1, name).bind(2, version);
  while (a.step()) v.aliases.push_back(a.text(0));
  return v;
}

json Models::list() {
  Statement s(db_, "SELECT m.name, m.description, m.created_at, COUNT(v.version), MAX(v.version), m.project "
                   "FROM models m LEFT JOIN model_versions v ON v.model = m.name GROUP BY m.name, m.description, "
                   "m.created_at, m.project ORDER BY m.name");
  json out = json::array();
  while (s.step()) {
    json aliases = json::object();
    Statement a(db_, "SELECT alias, version FROM model_aliases WHERE model = ? ORDER BY alias");
    a.bind(1, s.text(0));
    while (a.step()) aliases[a.text(0)] = a.integer(1);
    out.push_back({{"name", s.text(0)}, {"description", s.text(1)}, {"created_ms", s.integer(2)},
                   {"versions", s.integer(3)}, {"latest_version", s.is_null(4) ? json(nullptr) : json(s.integer(4))},
                   {"aliases", aliases}, {"project", s.text(5)}});
  }
  return {{"models", out}};
}

json Models::model(const std::string& name) {
  Statement m(db_, "SELECT description, created_at, project FROM models WHERE name = ?");
  m.bind(1, name);
  if (!m.step()) throw NotFound("no model '" + name + "' (`kiln model list` shows them)");
  json versions = json::array();
  Statement s(db_, "SELECT version FROM model_versions WHERE model = ? ORDER BY version");
  s.bind(1, name);
  while (s.step()) versions.push_back(find(name, s.integer(0))->json());
  return {{"name", name}, {"description", m.text(0)}, {"created_ms", m.integer(1)}, {"project", m.text(2)},
          {"versions", versions}};
}

ModelVersion Models::version(const std::string& name, const std::string& which) {
  int64_t number = 0;
  if (!which.empty() && std::all_of(which.begin(), which.end(), ::isdigit)) {
    number = std::stoll(which);
  } else if (which == "latest") {
    Statement s(db_, "SELECT MAX(version) FROM model_versions WHERE model = ? AND state = 'READY'");
    s.bind(1, name);
    if (!s.step() || s.is_null(0)) throw NotFound("model '" + name + "' has no READY version");
    number = s.integer(0);
  } else {
    Statement s(db_, "SELECT version FROM model_aliases WHERE model = ? AND alias = ?");
    s.bind(1, name).bind(2, which);
    if (!s.step()) {
      std::string known;
      Statement a(db_, "SELECT alias FROM model_aliases WHERE model = ? ORDER BY alias");
      a.bind(1, name);
      while (a.step()) known += (known.empty() ? "" : ", ") + a.text(0);
      throw NotFound("model '" + name + "' has no alias '" + which + "'" +
                     (known.empty() ? " (it has none)" : " (it has: " + known + ")"));
    }
    number = s.integer(0);
  }
  auto v = find(name, number);
  if (!v) throw NotFound("model '" + name + "' has no version " + std::to_string(number));
  return *v;
}

ModelVersion Models::resolve(const std::string& uri) {
  std::string text = uri.rfind("models:/", 0) == 0 ? uri.substr(8) : uri;
  size_t at = text.find_first_of("@/");
  if (at == std::string::npos) return version(text, "latest");
  return version(text.substr(0, at), text.substr(at + 1));
}

void Models::set_alias(const std::string& name, const std::string& alias, int64_t version) {
  check_model_name(alias, "alias");
  KILN_CHECK(alias != "latest" && !std::all_of(alias.begin(), alias.end(), ::isdigit), "alias '", alias,
             "' would read as a version; choose a word such as production or staging");
  auto v = find(name, version);
  if (!v) throw NotFound("model '" + name + "' has no version " + std::to_string(version));
  if (v->state != "READY")
    throw Conflict("version " + std::to_string(version) + " of '" + name + "' is " + v->state +
                   (v->reason.empty() ? "" : " (" + v->reason + ")") + "; only a READY version takes an alias");
  Statement(db_, "INSERT INTO model_aliases (model, alias, version) VALUES (?, ?, ?) "
                 "ON CONFLICT (model, alias) DO UPDATE SET version = excluded.version")
      .bind(1, name).bind(2, alias).bind(3, version)
      .run();
}

void Models::delete_alias(const std::string& name, const std::string& alias) {
  if (Statement(db_, "DELETE FROM model_aliases WHERE model = ? AND alias = ?").bind(1, name).bind(2, alias).run() == 0)
    throw NotFound("model '" + name + "' has no alias '" + alias + "'");
}

void Models::update(const std::string& name, int64_t version, const json& body) {
  auto v = find(name, version);
  if (!v) throw NotFound("model '" + name + "' has no version " + std::to_string(version));
  KILN_CHECK(body.is_object(), "an update is {\"description\": ..., \"tags\": {...}}");
  for (auto& [k, value] : body.items())
    KILN_CHECK(k == "description" || k == "tags", "unknown field '", k, "'; a version's description and tags change");
  if (body.contains("description")) {
    KILN_CHECK(body["description"].is_string(), "\"description\" must be text");
    v->description = body["description"];
  }
  if (body.contains("tags")) {
    KILN_CHECK(body["tags"].is_object(), "\"tags\" must be an object; a null value removes a tag");
    for (auto& [k, value] : body["tags"].items()) {
      if (value.is_null()) v->tags.erase(k);
      else v->tags[k] = value.is_string() ? value : json(value.dump());
    }
  }
  Statement(db_, "UPDATE model_versions SET description = ?, tags = ? WHERE model = ? AND version = ?")
      .bind(1, v->description).bind(2, v->tags.dump()).bind(3, name).bind(4, version)
      .run();
}

void Models::delete_version(const std::string& name, int64_t version) {
  auto v = find(name, version);
  if (!v) throw NotFound("model '" + name + "' has no version " + std::to_string(version));
  if (v->state == "PENDING") throw Conflict("version " + std::to_string(version) + " is still being checked");
  if (!v->aliases.empty()) {
    std::string list;
    for (const auto& a : v->aliases) list += (list.empty() ? "" : ", ") + a;
    throw Conflict("version " + std::to_string(version) + " of '" + name + "' is aliased as " + list +
                   "; move or delete the aliases first");
  }
  Statement(db_, "DELETE FROM model_versions WHERE model = ? AND version = ?").bind(1, name).bind(2, version).run();
  store_.remove(kBucket, v->file_key);
}

void Models::delete_model(const std::string& name) {
  json m = model(name);
  for (const auto& v : m["versions"])
    if (v["state"] == "PENDING") throw Conflict("model '" + name + "' has a version still being checked");
  Transaction t(db_);
  Statement(db_, "DELETE FROM model_aliases WHERE model = ?").bind(1, name).run();
  Statement(db_, "DELETE FROM model_versions WHERE model = ?").bind(1, name).run();
  Statement(db_, "DELETE FROM models WHERE name = ?").bind(1, name).run();
  t.commit();
  for (const auto& v : m["versions"]) store_.remove(kBucket, name + "/" + std::to_string(v["version"].get<int64_t>()) + "/model.onnx");
}

std::string Models::file(const ModelVersion& v) {
  KILN_CHECK(v.state == "READY", "version ", v.version, " of '", v.model, "' is ", v.state, "; its file is served once READY");
  auto info = store_.stat(kBucket, v.file_key);
  if (!info) throw NotFound("the file of version " + std::to_string(v.version) + " of '" + v.model + "' is gone from the store");
  return store_.read(kBucket, *info);
}

}  // namespace kiln::studio

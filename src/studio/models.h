#pragma once
// The model registry: named models with versions numbered 1, 2, 3..., each an
// ONNX file in the store (bucket studio-models) registered from a finished
// job (its checkpoint exported through its recipe), a store URL or uploaded
// bytes. A version is PENDING until a check has read its I/O signature from
// the graph and run it on a sample, then READY, or FAILED with the reason.
// Aliases (fmnist@production) point at versions.
#include <cstdint>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "studio/database.h"
#include "studio/jobs.h"
#include "studio/object_store.h"
#include "studio/runs.h"

namespace kiln::studio {

struct ModelVersion {
  std::string model;
  int64_t version = 0;
  std::string state, reason, source;
  int64_t job_id = 0;  // 0: not from a job
  std::string file_key, sha256;
  int64_t size = 0;
  nlohmann::json signature, lineage, tags;
  std::string description, created_by;
  int64_t created_ms = 0;
  std::vector<std::string> aliases;
  nlohmann::json json() const;
};

// Where a new version comes from: exactly one of job, url, bytes.
struct RegisterRequest {
  int64_t job = 0;
  std::string url;    // studio://bucket/key of an ONNX file
  std::string bytes;  // an ONNX file's bytes
  std::vector<int64_t> input_shape;  // a job's export: the sample's shape (default: from its recipe)
  std::string description;
  nlohmann::json tags = nlohmann::json::object();
  std::string project = "default";  // a new model's; an existing one keeps its own
};

class Models {
 public:
  // kiln: the executable that exports a job's checkpoint; work_dir: scratch files.
  Models(Database& db, ObjectStore& store, Jobs& jobs, Runs& runs, std::string kiln, std::string work_dir);
  ~Models();  // waits for the checks in progress

  // Creates the model if needed and its next version, PENDING; the check runs
  // on a thread of its own. Refuses a job that has not completed (Conflict).
  ModelVersion register_version(const std::string& name, RegisterRequest request, const std::string& by);
  nlohmann::json list();
  nlohmann::json model(const std::string& name);
  // `which`: a version number, an alias, or "latest" (the newest READY one).
  ModelVersion version(const std::string& name, const std::string& which);
  // "fmnist@production", "models:/fmnist@production", "fmnist/3", "fmnist".
  ModelVersion resolve(const std::string& uri);
  void set_alias(const std::string& name, const std::string& alias, int64_t version);
  void delete_alias(const std::string& name, const std::string& alias);
  void update(const std::string& name, int64_t version, const nlohmann::json& body);  // description, tags
  void delete_version(const std::string& name, int64_t version);
  void delete_model(const std::string& name);
  std::string file(const ModelVersion& v);
  // Blocks until no check is running (tests, shutdown).
  void wait_for_checks();

 private:
  void check(std::string name, int64_t version, RegisterRequest request);
  void finish(const std::string& name, int64_t version, const std::string& state, const std::string& reason,
              const nlohmann::json& signature = nullptr, const nlohmann::json& lineage = nullptr);
  std::optional<ModelVersion> find(const std::string& name, int64_t version);
  std::string export_job(int64_t job, const std::vector<int64_t>& input_shape, nlohmann::json& lineage);

  Database& db_;
  ObjectStore& store_;
  Jobs& jobs_;
  Runs& runs_;
  std::string kiln_, work_dir_;
  std::mutex mu_;
  struct Check {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Check> checks_;  // finished ones are joined at the next registration
};

// Model and alias names: 1 to 64 characters of a-z, 0-9, '-', '_', starting
// with a letter or digit; aliases are not all digits and not "latest".
void check_model_name(const std::string& name, const char* what);

}  // namespace kiln::studio

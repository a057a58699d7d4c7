#pragma once
// The models a server holds: one ONNX file, or a repository folder of
// <model>/<version>/model.onnx with an optional <model>/config.yaml.
//
// A repository's models can be loaded, reloaded and unloaded while the server
// runs (the repository endpoints, or a poll of the folder). A reload builds and
// warms up the new versions beside the old ones, then switches: requests that
// hold the old versions finish on them, and nothing fails in between. A reload
// that fails keeps the old versions serving.
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "serve/served_model.h"

namespace kiln::serve {

// A repository request that cannot be done (no such model, a load that
// failed, no repository at all): answered 400 with the reason.
class RepositoryError : public Error {
 public:
  explicit RepositoryError(const std::string& msg) : Error(msg) {}
};

class Repository {
 public:
  // Loads (and warms up) every model; throws naming the model that failed.
  // single_model_max_batch: the largest batch a --model server runs (it pads
  // to power-of-two sizes up to it, when the model's batch axis is dynamic).
  // device: where models run whose config.yaml names no device ("" or "cpu": the CPU).
  Repository(const std::string& single_model, const std::string& folder, Metrics& metrics,
             int64_t single_model_max_batch = 0, std::string device = "");
  // version "" means the highest one. Null when there is no such model. The
  // model stays alive while the pointer is held, even if it is unloaded.
  std::shared_ptr<ServedModel> find(const std::string& name, const std::string& version) const;
  std::vector<std::string> versions(const std::string& name) const;
  std::vector<std::string> loaded_names() const;

  // One line of the repository index: a loaded version ("READY"), or a model
  // on disk that is not loaded ("UNAVAILABLE", with the reason).
  struct IndexEntry {
    std::string name, version, state, reason;
  };
  std::vector<IndexEntry> index() const;
  // (Re)loads every version of the model from disk; RepositoryError when it
  // is not in the folder or does not load (the old versions keep serving).
  void load(const std::string& name);
  void unload(const std::string& name);
  // Loads what is new or changed in the folder and unloads what is gone.
  // Returns a line per change, for the log; failures keep the old versions.
  std::vector<std::string> poll();

 private:
  struct Entry {
    std::string folder;       // the model's folder in the repository
    std::string fingerprint;  // its files' names, sizes and times when last read
    std::map<int64_t, std::shared_ptr<ServedModel>> versions;  // empty: not loaded
    std::string reason;       // why it is not loaded
  };
  // Name -> folder of every model in the repository folder now.
  std::map<std::string, std::string> scan() const;
  std::map<int64_t, std::shared_ptr<ServedModel>> read_versions(const std::string& name, const std::string& folder);
  void require_folder() const;

  Metrics& metrics_;
  std::string folder_;                 // empty: one model file, not a repository
  std::string device_;                 // the models' device where their config.yaml names none
  std::mutex change_mu_;               // one load, unload or poll at a time
  mutable std::mutex mu_;              // guards models_ (held only to read or switch)
  std::map<std::string, Entry> models_;
};

}  // namespace kiln::serve

#pragma once
// A training job's spec: what to run (a recipe or a command), where its data
// comes from and its results go (studio:// URLs), how many ranks, its
// environment and time limit. Validated with errors that name the key.
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kiln::studio {

// What a job asks of the machine it runs on (each node, under Slurm).
struct Resources {
  int cpus = 0;           // CPU cores; 0: one per rank
  int64_t memory_mb = 0;  // 0: no claim
  int gpus = 0;
};

struct JobSpec {
  std::string name;
  std::string recipe;                          // a recipe YAML (kiln train runs it), or
  std::vector<std::string> command;            // a command each rank runs
  std::map<std::string, std::string> inputs;   // name -> studio://bucket/prefix, staged before the run
  std::string code;                            // studio://bucket/prefix: staged, and the ranks run in it
  std::string output;                          // studio://bucket/prefix the output directory syncs to
  int nproc = 1;                               // ranks per node
  int nnodes = 1;                              // nodes (more than one: the Slurm executor)
  std::map<std::string, std::string> env;
  double time_limit_s = 0;                     // 0: none
  double sync_every_s = 30;                    // output synced this often while running, and at the end
  Resources resources;
  int priority = 0;                            // among waiting jobs, higher first (then in submission order)
  std::string project = "default";             // the project it belongs to (projects.h)
  std::vector<std::string> secrets;            // the project's secrets set in its environment, by name
  int cores() const { return resources.cpus > 0 ? resources.cpus : nproc; }
};

// The flavours the studio offers: "cpu-N" (N cores, 4 GB of memory each)
// and "gpu-N" (N GPUs, with 8 cores and 32 GB each); throws naming them.
Resources parse_flavour(const std::string& flavour);
// A flavour's name, or {"cpus", "memory_mb", "gpus"}: jobs' resources,
// notebooks' and services' specs. `what` names it in errors.
Resources parse_resources(const nlohmann::json& j, const std::string& what);

// An environment variable's name: letters, digits and '_', not starting with a digit.
bool valid_env_name(const std::string& name);

JobSpec parse_job_spec(const nlohmann::json& spec);
nlohmann::json job_spec_json(const JobSpec& spec);

// "studio://bucket/prefix" -> bucket and prefix; throws naming `what` otherwise.
std::pair<std::string, std::string> split_store_url(const std::string& url, const std::string& what);

}  // namespace kiln::studio

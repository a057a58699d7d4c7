// Reading a rank's place from the variables its launcher set.
#include <algorithm>

#include "kiln/dist.h"
#include "kiln/error.h"

extern char** environ;

namespace kiln::dist {
namespace {

constexpr int kDefaultPort = 29500;

using Env = std::map<std::string, std::string>;

const std::string* find(const Env& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

int to_int(const std::string& text, const std::string& what) {
  size_t used = 0;
  long value = 0;
  try {
    value = std::stol(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  KILN_CHECK(used == text.size() && used > 0 && value >= 0 && value <= (1L << 30), what, "='", text,
             "' is not a non-negative integer; fix the launcher's setting or unset it");
  return static_cast<int>(value);
}

std::optional<int> int_var(const Env& env, const std::string& name) {
  const std::string* v = find(env, name);
  if (!v) return std::nullopt;
  return to_int(*v, name);
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(sep, start);
    if (end == std::string::npos) end = text.size();
    parts.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

// Commas inside brackets belong to a range list, not to the host list.
std::vector<std::string> split_outside_brackets(const std::string& list) {
  std::vector<std::string> parts;
  std::string current;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    KILN_CHECK(depth == 0 || depth == 1, "host list '", list, "' has unbalanced or nested brackets");
    if (c == ',' && depth == 0) {
      parts.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  KILN_CHECK(depth == 0, "host list '", list, "' has an unclosed '['");
  parts.push_back(current);
  return parts;
}

// Slurm's SLURM_TASKS_PER_NODE: "2(x3),1" is 2, 2, 2, 1.
std::vector<int> tasks_per_node(const std::string& text) {
  std::vector<int> counts;
  for (const std::string& part : split(text, ',')) {
    const size_t paren = part.find("(x");
    if (paren == std::string::npos) {
      counts.push_back(to_int(part, "SLURM_TASKS_PER_NODE"));
      continue;
    }
    KILN_CHECK(part.back() == ')', "SLURM_TASKS_PER_NODE='", text, "' is malformed near '", part, "'");
    const int count = to_int(part.substr(0, paren), "SLURM_TASKS_PER_NODE");
    const int times = to_int(part.substr(paren + 2, part.size() - paren - 3), "SLURM_TASKS_PER_NODE");
    counts.insert(counts.end(), times, count);
  }
  return counts;
}

void read_torchrun(const Env& env, Place& p) {
  p.source = "torchrun";
  p.rank = *int_var(env, "RANK");
  p.world_size = int_var(env, "WORLD_SIZE").value_or(1);
  p.local_rank = int_var(env, "LOCAL_RANK").value_or(p.rank);
  p.local_world_size = int_var(env, "LOCAL_WORLD_SIZE").value_or(p.world_size);
}

void read_slurm(const Env& env, Place& p) {
  p.source = "slurm";
  p.rank = *int_var(env, "SLURM_PROCID");
  p.world_size = int_var(env, "SLURM_NTASKS").value_or(1);
  p.local_rank = int_var(env, "SLURM_LOCALID").value_or(0);
  if (const std::string* nodes = find(env, "SLURM_JOB_NODELIST")) p.hosts = expand_host_list(*nodes);
  if (auto per_node = int_var(env, "SLURM_NTASKS_PER_NODE")) {
    p.local_world_size = *per_node;
  } else if (const std::string* tasks = find(env, "SLURM_TASKS_PER_NODE")) {
    const std::vector<int> counts = tasks_per_node(*tasks);
    const size_t node = static_cast<size_t>(int_var(env, "SLURM_NODEID").value_or(0));
    KILN_CHECK(node < counts.size(), "SLURM_NODEID=", node, " but SLURM_TASKS_PER_NODE='", *tasks, "' lists ",
               counts.size(), " nodes");
    p.local_world_size = counts[node];
  } else {
    p.local_world_size = p.hosts.empty() ? p.world_size : std::max<int>(1, p.world_size / static_cast<int>(p.hosts.size()));
  }
  if (!p.hosts.empty()) p.master_addr = p.hosts.front();
  // Jobs sharing a node must not share a port: derive it from the job id.
  if (auto job = int_var(env, "SLURM_JOB_ID")) p.master_port = 20000 + *job % 20000;
}

void read_modelarts(const Env& env, Place& p) {
  p.source = "modelarts";
  p.rank = *int_var(env, "VC_TASK_INDEX");
  p.world_size = int_var(env, "VC_WORKER_NUM").value_or(1);
  p.local_rank = 0;
  p.local_world_size = 1;
  if (const std::string* hosts = find(env, "VC_WORKER_HOSTS")) {
    for (const std::string& h : split(*hosts, ','))
      if (!h.empty()) p.hosts.push_back(h);
    KILN_CHECK(static_cast<int>(p.hosts.size()) == p.world_size, "VC_WORKER_HOSTS lists ", p.hosts.size(),
               " hosts but VC_WORKER_NUM=", p.world_size, "; they must agree");
    p.master_addr = p.hosts.front();
  }
}

}  // namespace

std::vector<std::string> expand_host_list(const std::string& list) {
  std::vector<std::string> hosts;
  for (const std::string& item : split_outside_brackets(list)) {
    KILN_CHECK(!item.empty(), "host list '", list, "' has an empty entry");
    const size_t open = item.find('[');
    if (open == std::string::npos) {
      hosts.push_back(item);
      continue;
    }
    const size_t close = item.find(']', open);
    const std::string prefix = item.substr(0, open), suffix = item.substr(close + 1);
    KILN_CHECK(suffix.find('[') == std::string::npos, "host list entry '", item,
               "' has two bracket groups; Kiln expands one per host name");
    for (const std::string& range : split(item.substr(open + 1, close - open - 1), ',')) {
      const size_t dash = range.find('-');
      const std::string first = range.substr(0, dash);
      const std::string last = dash == std::string::npos ? first : range.substr(dash + 1);
      const int lo = to_int(first, "host list '" + list + "' range"), hi = to_int(last, "host list '" + list + "' range");
      KILN_CHECK(lo <= hi && hi - lo < 100000, "host list '", list, "' has the range '", range,
                 "', which runs backwards or is too long");
      for (int i = lo; i <= hi; ++i) {
        std::string number = std::to_string(i);
        if (number.size() < first.size()) number.insert(0, first.size() - number.size(), '0');  // node[08-10]
        hosts.push_back(prefix + number + suffix);
      }
    }
  }
  return hosts;
}

Place place_from(const Env& env, const PlaceOverrides& overrides) {
  Place p;
  if (find(env, "RANK"))
    read_torchrun(env, p);
  else if (find(env, "SLURM_PROCID"))
    read_slurm(env, p);
  else if (find(env, "VC_TASK_INDEX"))
    read_modelarts(env, p);
  if (const std::string* addr = find(env, "MASTER_ADDR")) p.master_addr = *addr;
  if (auto port = int_var(env, "MASTER_PORT")) p.master_port = *port;
  if (overrides.rank) p.rank = *overrides.rank;
  if (overrides.world_size) p.world_size = *overrides.world_size;
  if (overrides.local_rank) p.local_rank = *overrides.local_rank;
  if (overrides.local_world_size) p.local_world_size = *overrides.local_world_size;
  if (overrides.master_addr) p.master_addr = *overrides.master_addr;
  if (overrides.master_port) p.master_port = *overrides.master_port;
  if (p.master_addr.empty()) p.master_addr = "127.0.0.1";
  if (p.master_port == 0) p.master_port = kDefaultPort;
  const std::string from = p.source == "none" ? " (as given)" : " (read from " + p.source + "'s variables or given)";
  KILN_CHECK(p.world_size >= 1, "the world size is ", p.world_size, from, "; it must be at least 1");
  KILN_CHECK(p.rank >= 0 && p.rank < p.world_size, "rank ", p.rank, " is outside a world of ", p.world_size, " ranks", from,
             "; ranks run from 0 to the world size minus one");
  KILN_CHECK(p.local_world_size >= 1 && p.local_rank >= 0 && p.local_rank < p.local_world_size, "local rank ", p.local_rank,
             " is outside the ", p.local_world_size, " ranks of its node", from);
  KILN_CHECK(p.master_port > 0 && p.master_port < 65536, "master port ", p.master_port, from, " is not a TCP port (1-65535)");
  return p;
}

Place place_from_environment(const PlaceOverrides& overrides) {
  Env env;
  for (char** e = environ; *e; ++e) {
    const std::string entry(*e);
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return place_from(env, overrides);
}

}  // namespace kiln::dist

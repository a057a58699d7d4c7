#pragma once
// Moving many files between local paths and the studio's store: the plan of
// what to copy (files unchanged by SHA-256 are skipped, and with `mirror` what
// the source lacks is removed at the destination), run by several workers at
// once, each with its own connection, with a progress line on a terminal.
#include <string>
#include <vector>

#include "studio_client.h"

namespace kiln::cli {

struct Transfer {
  std::string local;
  StoreUrl remote;
  bool upload = true;
  int64_t bytes = 0;
};

struct TransferPlan {
  std::vector<Transfer> copies;
  std::vector<std::string> local_removals;  // mirror: local files the store lacks
  std::vector<StoreUrl> remote_removals;    // mirror: objects the local tree lacks
  int unchanged = 0;
};

// SRC and DST: one a local path, the other a studio:// URL. A single file
// copies to a key (or into a folder); a folder or prefix copies recursively.
TransferPlan plan_transfers(Remote& remote, const std::string& src, const std::string& dst, bool mirror);

// Runs the plan with `workers` connections at once; prints a summary line
// ("uploaded 3 files to DESTINATION (...)").
void run_transfers(const TransferPlan& plan, const std::string& server, const std::string& token, int workers,
                   const std::string& verb, const std::string& destination);

}  // namespace kiln::cli

#pragma once
// A studio on a free loopback port over a fresh data directory, its jobs run
// by the kiln CLI under test (KILN_CLI).
#include <memory>
#include <string>

#include "kiln/studio.h"

namespace kiln::testing {

struct Studio {
  explicit Studio(const std::string& dir, size_t max_upload_bytes = size_t{1} << 30) {
    studio::StudioOptions o;
    o.data_dir = dir;
    o.port = 0;
    o.access_log = "";
    o.max_upload_bytes = max_upload_bytes;
#ifdef KILN_CLI
    o.kiln_executable = KILN_CLI;
#endif
    server = std::make_unique<studio::StudioServer>(o);
    port = server->start();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
  std::unique_ptr<studio::StudioServer> server;
  int port = 0;
};

}  // namespace kiln::testing

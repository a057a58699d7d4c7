#pragma once
// A studio on a free loopback port over a fresh data directory, its jobs run
// by the kiln CLI under test (KILN_CLI).
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "kiln/studio.h"
#include "support/job_files.h"

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
#ifdef KILN_CLI
  // Runs `kiln ARGS` against this studio with `token`, as a user would;
  // returns the exit status and what it printed (kept in dir/out.txt).
  std::pair<int, std::string> kiln(const std::string& token, const std::string& dir, const std::string& args) const {
    const std::string out = dir + "/out.txt";
    const std::string command = "KILN_STUDIO_URL=" + url() + " KILN_STUDIO_TOKEN=" + token + " " + KILN_CLI + " " +
                                args + " > " + out + " 2>&1";
    const int rc = std::system(command.c_str());
    return {rc, text_of(out)};
  }
#endif
  std::unique_ptr<studio::StudioServer> server;
  int port = 0;
};

}  // namespace kiln::testing

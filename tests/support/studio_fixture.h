#pragma once
// A studio on a free loopback port over a fresh data directory, its jobs run
// by the kiln CLI under test (KILN_CLI).
#include <httplib.h>
#include <libpq-fe.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "kiln/studio.h"
#include "support/job_files.h"

namespace kiln::testing {

// The database of the studio whose data directory is `dir`: the SQLite file
// in it, or, when KILN_TEST_POSTGRES names a PostgreSQL server
// (tests/support/with_postgres.sh), a database of its own there, made on
// first use and found again by the same directory.
inline std::string test_database(const std::string& dir) {
  const char* server = std::getenv("KILN_TEST_POSTGRES");
  if (!server || !*server) return "";
  const std::string name = "studio_" + studio::sha256_hex(dir.data(), dir.size()).substr(0, 16);
  PGconn* admin = PQconnectdb((std::string(server) + "/postgres").c_str());
  EXPECT_EQ(PQstatus(admin), CONNECTION_OK) << PQerrorMessage(admin);
  PGresult* r = PQexec(admin, ("SELECT 1 FROM pg_database WHERE datname = '" + name + "'").c_str());
  const bool exists = PQntuples(r) > 0;
  PQclear(r);
  if (!exists) {
    r = PQexec(admin, ("CREATE DATABASE " + name).c_str());
    EXPECT_EQ(PQresultStatus(r), PGRES_COMMAND_OK) << PQerrorMessage(admin);
    PQclear(r);
  }
  PQfinish(admin);
  return std::string(server) + "/" + name;
}

// An API token of the studio at `dir`.
inline std::string create_token(const std::string& dir, const std::string& name, studio::Scope scope) {
  return studio::create_token(dir, name, scope, test_database(dir));
}

struct Studio {
  // kiln: the executable that runs jobs and serves (default: the CLI under test).
  // cpus: the cores the local executor runs jobs on (0: the machine's).
  explicit Studio(const std::string& dir, size_t max_upload_bytes = size_t{1} << 30, const std::string& kiln = "",
                  const std::string& executor = "local", int cpus = 0) {
    studio::StudioOptions o;
    o.data_dir = dir;
    o.database = test_database(dir);
    o.port = 0;
    o.access_log = "";
    o.max_upload_bytes = max_upload_bytes;
    o.executor = executor;
    o.cpus = cpus;
#ifdef KILN_CLI
    o.kiln_executable = KILN_CLI;
#endif
    if (!kiln.empty()) o.kiln_executable = kiln;
    server = std::make_unique<studio::StudioServer>(o);
    port = server->start();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
#ifdef KILN_CLI
  // Runs `kiln ARGS` against this studio with `token`, as a user would;
  // returns the exit status and what it printed (kept in dir/out.txt).
  // `env`: more VAR=value settings for the command.
  std::pair<int, std::string> kiln(const std::string& token, const std::string& dir, const std::string& args,
                                   const std::string& env = "") const {
    const std::string out = dir + "/out.txt";
    const std::string command = env + " KILN_STUDIO_URL=" + url() + " KILN_STUDIO_TOKEN=" + token + " " + KILN_CLI +
                                " " + args + " > " + out + " 2>&1";
    const int rc = std::system(command.c_str());
    return {rc, text_of(out)};
  }
  // Debian's Fashion-MNIST uploaded to studio://data/fmnist with `kiln store`;
  // adds a failure and returns false when that fails.
  bool upload_fashion_mnist(const std::string& token, const std::string& dir) const {
    const std::string fmnist = "/usr/share/datasets/fashion-mnist";
    if (!std::filesystem::exists(fmnist)) {
      ADD_FAILURE() << "apt-get install dataset-fashion-mnist (scripts/install-deps.sh does)";
      return false;
    }
    auto made = kiln(token, dir, "store mb studio://data");
    auto up = kiln(token, dir, "store cp " + fmnist + " studio://data/fmnist");
    EXPECT_EQ(made.first, 0) << made.second;
    EXPECT_EQ(up.first, 0) << up.second;
    return made.first == 0 && up.first == 0;
  }
#endif
  std::unique_ptr<studio::StudioServer> server;
  int port = 0;
};

// The studio's REST API with a token: status and JSON reply (the raw body
// when it is not JSON, null when there is none).
struct StudioApi {
  StudioApi(int port, const std::string& token) : http("127.0.0.1", port) {
    http.set_bearer_token_auth(token);
    http.set_keep_alive(true);
    http.set_tcp_nodelay(true);
    http.set_read_timeout(30, 0);
  }
  std::pair<int, nlohmann::json> call(const std::string& method, const std::string& path, const std::string& body = "",
                                      const std::string& type = "application/json") {
    httplib::Request req;
    req.method = method;
    req.path = path;
    req.body = body;
    if (!body.empty()) req.set_header("Content-Type", type);
    auto r = http.send(req);
    if (!r) return {0, nullptr};
    nlohmann::json j = nullptr;
    try {
      if (!r->body.empty()) j = nlohmann::json::parse(r->body);
    } catch (const std::exception&) {
      j = r->body;
    }
    return {r->status, j};
  }
  std::pair<int, nlohmann::json> call_json(const std::string& method, const std::string& path,
                                           const nlohmann::json& body) {
    return call(method, path, body.dump());
  }
  httplib::Client http;
};

}  // namespace kiln::testing

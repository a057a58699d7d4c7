#pragma once
// The studio's jobs endpoints as the job tests use them: GET with a 200
// expected, submit, and wait for a state.
#include <httplib.h>

#include <gtest/gtest.h>

#include <chrono>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

namespace kiln::testing {

struct JobApi {
  JobApi(int port, const std::string& token) : client("127.0.0.1", port) { client.set_bearer_token_auth(token); }
  nlohmann::json get(const std::string& path) {
    auto r = client.Get(path);
    EXPECT_EQ(r->status, 200) << path << ": " << r->body;
    return nlohmann::json::parse(r->body);
  }
  int64_t submit(const nlohmann::json& spec) {
    auto r = client.Post("/api/v1/jobs", spec.dump(), "application/json");
    EXPECT_EQ(r->status, 201) << r->body;
    return r->status == 201 ? nlohmann::json::parse(r->body)["id"].get<int64_t>() : -1;
  }
  // Polls until the job reaches a state in `states` (or `seconds` pass).
  nlohmann::json wait_for(int64_t id, std::initializer_list<const char*> states, int seconds = 60) {
    nlohmann::json j;
    for (int i = 0; i < seconds * 10; ++i) {
      j = get("/api/v1/jobs/" + std::to_string(id));
      for (const char* s : states)
        if (j["state"] == s) return j;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "job " << id << " stayed " << j.dump();
    return j;
  }
  httplib::Client client;
};

// A job whose every rank runs a shell script.
inline nlohmann::json shell_job(const std::string& name, const std::string& script, int nproc = 2) {
  return {{"name", name}, {"command", {"/bin/sh", "-c", script, "job"}}, {"nproc", nproc}};
}

}  // namespace kiln::testing

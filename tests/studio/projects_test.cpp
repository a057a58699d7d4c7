// People and projects: users who log in with a password, projects that own
// buckets and jobs, roles checked on every route (and on what a job reads),
// lists that show a user's projects only, project admins who manage members
// and secrets, secrets that reach a job's environment and are never shown,
// and an audit log that names the user.
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "kiln/studio.h"
#include "support/job_api.h"
#include "support/job_files.h"
#include "support/studio_fixture.h"

using namespace kiln;
using json = nlohmann::json;
using kiln::testing::fresh_dir;
using kiln::testing::Studio;
using kiln::testing::StudioApi;

namespace {

std::string login(int port, const std::string& user, const std::string& password, int expected = 200) {
  httplib::Client c("127.0.0.1", port);
  auto r = c.Post("/api/v1/login", json({{"user", user}, {"password", password}}).dump(), "application/json");
  EXPECT_EQ(r->status, expected) << r->body;
  return r->status == 200 ? json::parse(r->body)["token"].get<std::string>() : r->body;
}

}  // namespace

TEST(StudioProjects, RolesPerProjectOnEveryRouteSecretsAndTheAuditNamesTheUser) {
  auto dir = fresh_dir("projects");
  const std::string db = kiln::testing::test_database(dir);
  // The operator, on the data directory: users, a project, roles.
  studio::create_user(dir, "ann", "correct horse battery", db);
  studio::create_user(dir, "bob", "bob's long password", db);
  EXPECT_THROW(studio::create_user(dir, "eve", "short", db), Error);
  EXPECT_THROW(studio::create_user(dir, "ann", "another password", db), Error);
  studio::create_project(dir, "vision", db);
  studio::set_project_role(dir, "vision", "ann", "admin", db);
  studio::set_project_role(dir, "vision", "bob", "viewer", db);
  EXPECT_THROW(studio::set_project_role(dir, "vision", "bob", "owner", db), Error);
  EXPECT_THROW(studio::set_project_role(dir, "speech", "bob", "viewer", db), Error);
  Studio s(dir);
  const std::string ops_token = kiln::testing::create_token(dir, "ops", studio::Scope::Admin);
  StudioApi ops(s.port, ops_token);

  // Logging in: a wrong password is refused and recorded; the right one gives a token of the user's.
  EXPECT_NE(login(s.port, "ann", "wrong password", 401).find("wrong user name or password"), std::string::npos);
  login(s.port, "nobody", "whatever it is", 401);
  httplib::Client flood("127.0.0.1", s.port);
  EXPECT_EQ(flood.Post("/api/v1/login", std::string(100 * 1024, 'x'), "application/json")->status, 413);
  StudioApi ann(s.port, login(s.port, "ann", "correct horse battery"));
  json me = ann.call("GET", "/api/v1/whoami").second;
  EXPECT_EQ(me["user"], "ann");
  EXPECT_EQ(me["projects"], json({{"vision", "admin"}}));
  StudioApi bob(s.port, studio::create_token(dir, "bob-laptop", studio::Scope::Write, db, 0, "bob"));

  // Buckets belong to projects; a viewer reads, a developer writes.
  ASSERT_EQ(ann.call("PUT", "/api/v1/buckets/vdata?project=vision").first, 201);
  ASSERT_EQ(ann.call("PUT", "/api/v1/buckets/vdata/objects/a.txt", "seen", "text/plain").first, 201);
  ASSERT_EQ(ops.call("PUT", "/api/v1/buckets/other").first, 201);
  ASSERT_EQ(ops.call("PUT", "/api/v1/buckets/other/objects/b.txt", "hidden", "text/plain").first, 201);
  EXPECT_EQ(bob.call("GET", "/api/v1/buckets/vdata/objects/a.txt").first, 200);
  auto refused = bob.call("PUT", "/api/v1/buckets/vdata/objects/c.txt", "mine", "text/plain");
  EXPECT_EQ(refused.first, 403);
  EXPECT_NE(refused.second.dump().find("user bob is a viewer in project 'vision'"), std::string::npos)
      << refused.second.dump();
  EXPECT_NE(refused.second.dump().find("kiln project grant vision bob developer"), std::string::npos);
  EXPECT_EQ(ann.call("GET", "/api/v1/buckets/other/objects/b.txt").first, 403);
  EXPECT_EQ(ann.call("PUT", "/api/v1/buckets/mine?project=speech").first, 400) << "no such project";
  // Lists hold the user's projects' items only.
  EXPECT_EQ(ann.call("GET", "/api/v1/buckets").second["buckets"], json({"vdata"}));
  EXPECT_EQ(ops.call("GET", "/api/v1/buckets").second["buckets"].size(), 2u);
  // The studio's own routes are for studio-wide tokens.
  auto tokens = ann.call("GET", "/api/v1/tokens");
  EXPECT_EQ(tokens.first, 403);
  EXPECT_NE(tokens.second.dump().find("needs a studio-wide token"), std::string::npos) << tokens.second.dump();

  // A project admin manages its members; a developer may not.
  ASSERT_EQ(ann.call("PUT", "/api/v1/projects/vision/members/bob", R"({"role": "developer"})").first, 200);
  EXPECT_EQ(bob.call("PUT", "/api/v1/buckets/vdata/objects/c.txt", "mine", "text/plain").first, 201);
  EXPECT_EQ(bob.call("PUT", "/api/v1/projects/vision/members/bob", R"({"role": "admin"})").first, 403);
  json project = bob.call("GET", "/api/v1/projects/vision").second;
  EXPECT_EQ(project["members"].size(), 2u) << project.dump();
  EXPECT_EQ(bob.call("GET", "/api/v1/projects").second["projects"].size(), 1u);

  // Secrets: set by the admin, listed by name only, given to the jobs that name them.
  ASSERT_EQ(ann.call("PUT", "/api/v1/projects/vision/secrets/API_KEY", "s3cret-value", "application/octet-stream").first,
            200);
  json secrets = ann.call("GET", "/api/v1/projects/vision/secrets").second;
  EXPECT_EQ(secrets["secrets"], json({"API_KEY"}));
  EXPECT_EQ(secrets.dump().find("s3cret"), std::string::npos);
  EXPECT_EQ(bob.call("GET", "/api/v1/projects/vision/secrets").first, 403) << "a developer sees no secrets";
  kiln::testing::JobApi bob_jobs(s.port, studio::create_token(dir, "bob-ci", studio::Scope::Write, db, 0, "bob"));
  json spec = kiln::testing::shell_job("with a key", "echo key=$API_KEY", 1);
  spec["project"] = "vision";
  spec["secrets"] = {"API_KEY"};
  const int64_t id = bob_jobs.submit(spec);
  json done = bob_jobs.wait_for(id, {"Completed", "Failed", "Abnormal"});
  ASSERT_EQ(done["state"], "Completed") << done.dump();
  EXPECT_EQ(done["project"], "vision");
  EXPECT_EQ(done.dump().find("s3cret"), std::string::npos) << done.dump();
  json logs = bob_jobs.get("/api/v1/jobs/" + std::to_string(id) + "/logs");
  EXPECT_NE(logs.dump().find("key=s3cret-value"), std::string::npos) << logs.dump();
  // A job may not read a bucket of a project its user has no role in, nor name a secret that is not there.
  json sneaky = kiln::testing::shell_job("sneaky", "cat $KILN_X_URL/b.txt", 1);
  sneaky["project"] = "vision";
  sneaky["inputs"] = {{"x_url", "studio://other"}};
  auto r = bob_jobs.client.Post("/api/v1/jobs", sneaky.dump(), "application/json");
  EXPECT_EQ(r->status, 403);
  EXPECT_NE(r->body.find("input studio://other needs viewer"), std::string::npos) << r->body;
  // A retry is judged again on what it reaches: a role lost since is a role lost.
  studio::set_project_role(dir, "default", "bob", "viewer", db);
  const int64_t reader = bob_jobs.submit(sneaky);
  ASSERT_GT(reader, 0);
  bob_jobs.wait_for(reader, {"Completed", "Failed"});
  studio::set_project_role(dir, "default", "bob", "none", db);
  r = bob_jobs.client.Post("/api/v1/jobs/" + std::to_string(reader) + "/retry", "", "application/json");
  EXPECT_EQ(r->status, 403);
  EXPECT_NE(r->body.find("input studio://other needs viewer"), std::string::npos) << r->body;
  spec["secrets"] = {"NOT_THERE"};
  r = bob_jobs.client.Post("/api/v1/jobs", spec.dump(), "application/json");
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("project 'vision' has no secret 'NOT_THERE'"), std::string::npos) << r->body;
  // Bob's job is in the list of a user of its project, not in one of the default project's only.
  const int64_t ops_job = kiln::testing::JobApi(s.port, ops_token).submit(kiln::testing::shell_job("ops", "true", 1));
  json ann_jobs = ann.call("GET", "/api/v1/jobs").second["jobs"];
  ASSERT_EQ(ann_jobs.size(), 2u) << ann_jobs.dump();  // the two of project vision, newest first
  EXPECT_EQ(ann_jobs[0]["id"], reader);
  EXPECT_EQ(ann_jobs[1]["id"], id);
  EXPECT_EQ(ann.call("GET", "/api/v1/jobs/" + std::to_string(ops_job)).first, 403);
  EXPECT_EQ(ops.call("GET", "/api/v1/jobs").second["jobs"].size(), 3u);

  // Models and services: registered and deployed in the project; a viewer may
  // send inferences but not stop the service; a service may not serve a model
  // of a project its user has no role in.
  std::ifstream onnx(std::string(KILN_SOURCE_DIR) + "/tests/fixtures/onnx/cnn.onnx", std::ios::binary);
  const std::string model((std::istreambuf_iterator<char>(onnx)), std::istreambuf_iterator<char>());
  auto registered = ann.call("POST", "/api/v1/models/fm/versions?project=vision", model, "application/octet-stream");
  ASSERT_EQ(registered.first, 201) << registered.second.dump();
  ASSERT_EQ(ops.call("POST", "/api/v1/models/other/versions", model, "application/octet-stream").first, 201);
  for (int i = 0; i < 300 && ann.call("GET", "/api/v1/models/fm/versions/1").second["state"] == "PENDING"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(ann.call("GET", "/api/v1/models").second["models"].size(), 1u);
  auto foreign = ann.call("POST", "/api/v1/services",
                          json({{"name", "x"}, {"project", "vision"}, {"versions", {{{"model", "other/1"}}}}}).dump());
  EXPECT_EQ(foreign.first, 403);
  EXPECT_NE(foreign.second.dump().find("model other/1 needs viewer"), std::string::npos) << foreign.second.dump();
  ASSERT_EQ(ann.call("POST", "/api/v1/services",
                     json({{"name", "vs"}, {"project", "vision"}, {"versions", {{{"model", "fm/1"}, {"max_batch", 0}}}}})
                         .dump()).first, 201);
  studio::create_user(dir, "vic", "vic's long password", db);
  studio::set_project_role(dir, "vision", "vic", "viewer", db);
  StudioApi vic(s.port, studio::create_token(dir, "vic", studio::Scope::Write, db, 0, "vic"));
  json service = json::object();
  for (int i = 0; i < 600 && service.value("state", "") != "Running"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    service = vic.call("GET", "/api/v1/services/vs").second;
  }
  ASSERT_EQ(service["state"], "Running") << service.dump();
  EXPECT_EQ(service["project"], "vision");
  const json input = {{"inputs", {{{"name", "input"}, {"shape", {1, 1, 28, 28}}, {"datatype", "FP32"},
                                   {"data", std::vector<float>(784, 0.5f)}}}}};
  EXPECT_EQ(vic.call("POST", "/api/v1/services/vs/v2/models/vs/infer", input.dump()).first, 200);
  EXPECT_EQ(vic.call("POST", "/api/v1/services/vs/stop").first, 403);
  EXPECT_EQ(ann.call("POST", "/api/v1/services/vs/stop").first, 202);

  // Guessing passwords: past 10 failures in a minute from one address, it is refused at once.
  for (int i = 0; i < 8; ++i) login(s.port, "ann", "guess " + std::to_string(i), 401);
  EXPECT_NE(login(s.port, "ann", "correct horse battery", 429).find("10 failed logins from this address in a minute"),
            std::string::npos);

  // The audit log names the user of each write, and the failed logins.
  json audit = ops.call("GET", "/api/v1/audit?limit=100").second["entries"];
  bool bob_wrote = false, ann_granted = false, failed_login = false, refused_write = false;
  for (const auto& e : audit) {
    bob_wrote |= e["user"] == "bob" && e["path"] == "/api/v1/buckets/vdata/objects/c.txt" && e["status"] == 201;
    refused_write |= e["user"] == "bob" && e["path"] == "/api/v1/buckets/vdata/objects/c.txt" && e["status"] == 403;
    ann_granted |= e["user"] == "ann" && e["path"] == "/api/v1/projects/vision/members/bob";
    failed_login |= e["token"] == "(login)" && e["user"] == "ann" && e["status"] == 401;
  }
  EXPECT_TRUE(bob_wrote && refused_write && ann_granted && failed_login) << audit.dump();
}

TEST(StudioProjects, TheCommandLineCreatesUsersLogsInAndManagesAProject) {
  auto dir = fresh_dir("projects_cli");
  const std::string db = kiln::testing::test_database(dir);
  Studio s(dir);
  const std::string password_file = dir + "/password";
  std::ofstream(password_file) << "carol's password\n";
  const std::string local = " --data " + dir + (db.empty() ? "" : " --db " + db);
  auto created = s.kiln("", dir, "studio user create carol --password-file " + password_file + local);
  ASSERT_EQ(created.first, 0) << created.second;
  ASSERT_EQ(s.kiln("", dir, "studio user create dan --password-file " + password_file + local).first, 0);
  ASSERT_EQ(s.kiln("", dir, "studio project create nlp" + local).first, 0);
  auto granted = s.kiln("", dir, "studio project grant nlp carol admin" + local);
  ASSERT_EQ(granted.first, 0) << granted.second;
  auto bad = s.kiln("", dir, "studio project grant nlp carol owner" + local);
  EXPECT_NE(bad.first, 0);
  EXPECT_NE(bad.second.find("the roles are viewer, developer and admin"), std::string::npos) << bad.second;
  auto logged_in = s.kiln("", dir, "studio login --user carol --password-file " + password_file);
  ASSERT_EQ(logged_in.first, 0) << logged_in.second;
  const std::string token = logged_in.second.substr(0, logged_in.second.find('\n'));
  ASSERT_EQ(token.rfind("kst_", 0), 0u) << logged_in.second;
  auto grant = s.kiln(token, dir, "project grant nlp dan viewer");
  ASSERT_EQ(grant.first, 0) << grant.second;
  auto shown = s.kiln(token, dir, "project show nlp");
  ASSERT_EQ(shown.first, 0) << shown.second;
  EXPECT_NE(shown.second.find("dan"), std::string::npos) << shown.second;
  EXPECT_NE(shown.second.find("viewer"), std::string::npos) << shown.second;
  auto secret = s.kiln(token, dir, "project secret set nlp HF_TOKEN --value-file " + password_file);
  ASSERT_EQ(secret.first, 0) << secret.second;
  auto names = s.kiln(token, dir, "project secret list nlp");
  EXPECT_EQ(names.second, "HF_TOKEN\n") << names.first;
  auto wrong = s.kiln("", dir, "studio login --user carol --password-file /dev/null");
  EXPECT_NE(wrong.first, 0);
  EXPECT_NE(wrong.second.find("wrong user name or password"), std::string::npos) << wrong.second;
}

TEST(StudioProjects, AProjectsQuotaHoldsBackItsJobsAndNotOtherProjects) {
  auto dir = fresh_dir("projects_quota");
  const std::string db = kiln::testing::test_database(dir);
  studio::create_project(dir, "small", db);
  studio::create_user(dir, "sam", "sam's long password", db);
  studio::set_project_role(dir, "small", "sam", "admin", db);
  Studio s(dir, size_t{1} << 30, "", "local", 4);
  const std::string ops_token = kiln::testing::create_token(dir, "ops", studio::Scope::Admin);
  StudioApi ops(s.port, ops_token);
  // The quota is the operator's: not even the project's admin sets it.
  StudioApi sam(s.port, studio::create_token(dir, "sam", studio::Scope::Admin, db, 0, "sam"));
  EXPECT_EQ(sam.call("PUT", "/api/v1/projects/small/quota", R"({"cpus": 4})").first, 403);
  auto set = ops.call("PUT", "/api/v1/projects/small/quota", R"({"cpus": 1})");
  ASSERT_EQ(set.first, 200) << set.second.dump();
  EXPECT_EQ(set.second["quota"]["cpus"], 1);
  EXPECT_EQ(ops.call("PUT", "/api/v1/projects/small/quota", R"({"cpus": -1})").first, 400);

  kiln::testing::JobApi jobs(s.port, ops_token);
  json big = kiln::testing::shell_job("big", "true", 2);
  big["project"] = "small";
  auto refused = jobs.client.Post("/api/v1/jobs", big.dump(), "application/json");
  EXPECT_EQ(refused->status, 400);
  EXPECT_NE(refused->body.find("project small's quota is 1"), std::string::npos) << refused->body;
  auto in_small = [](const char* name, const char* script) {
    json j = kiln::testing::shell_job(name, script, 1);
    j["project"] = "small";
    return j;
  };
  const int64_t a = jobs.submit(in_small("a", "sleep 3"));
  jobs.wait_for(a, {"Running"});
  const int64_t b = jobs.submit(in_small("b", "true"));
  const int64_t c = jobs.submit(kiln::testing::shell_job("c", "true", 1));
  // c, behind b in the queue but of another project, runs while a holds small's one core.
  json done_c = jobs.wait_for(c, {"Completed", "Failed"});
  EXPECT_EQ(done_c["state"], "Completed");
  json waiting = jobs.get("/api/v1/jobs/" + std::to_string(b));
  EXPECT_EQ(waiting["state"], "Pending") << waiting.dump();
  EXPECT_NE(waiting["reason"].get<std::string>().find("waiting for project small's quota (1 of its 1 CPU core in use by job " +
                                                      std::to_string(a) + ")"),
            std::string::npos)
      << waiting.dump();
  EXPECT_EQ(jobs.wait_for(b, {"Completed", "Failed"})["state"], "Completed");
  EXPECT_EQ(jobs.get("/api/v1/jobs/" + std::to_string(a))["state"], "Completed");
}

// Every role on every kind of route of a project: what each role may do,
// the next role down refused, a member of another project refused
// everything, and a secret's value in no answer and no audit entry.
TEST(StudioProjects, EachRoleOnEachRouteAndAnOutsiderOnNone) {
  auto dir = fresh_dir("projects_roles");
  const std::string db = kiln::testing::test_database(dir);
  studio::create_project(dir, "a", db);
  studio::create_project(dir, "b", db);
  const std::vector<std::string> roles = {"viewer", "developer", "admin"};
  for (const auto& role : roles) {
    studio::create_user(dir, role, role + "'s password", db);
    studio::set_project_role(dir, "a", role, role, db);
  }
  studio::create_user(dir, "outsider", "outsider's password", db);
  studio::set_project_role(dir, "b", "outsider", "admin", db);
  Studio s(dir);
  StudioApi admin(s.port, studio::create_token(dir, "admin-token", studio::Scope::Admin, db, 0, "admin"));
  // Project a's things: a bucket with an object, a completed job with logs, a model, a secret.
  ASSERT_EQ(admin.call("PUT", "/api/v1/buckets/adata?project=a").first, 201);
  ASSERT_EQ(admin.call("PUT", "/api/v1/buckets/adata/objects/x.txt", "x", "text/plain").first, 201);
  kiln::testing::JobApi jobs(s.port, studio::create_token(dir, "admin-jobs", studio::Scope::Admin, db, 0, "admin"));
  json spec = kiln::testing::shell_job("a-job", "echo logged", 1);
  spec["project"] = "a";
  const int64_t job = jobs.submit(spec);
  ASSERT_EQ(jobs.wait_for(job, {"Completed", "Failed"})["state"], "Completed");
  std::ifstream onnx(std::string(KILN_SOURCE_DIR) + "/tests/fixtures/onnx/mlp.onnx", std::ios::binary);
  const std::string model((std::istreambuf_iterator<char>(onnx)), std::istreambuf_iterator<char>());
  ASSERT_EQ(admin.call("POST", "/api/v1/models/am/versions?project=a", model, "application/octet-stream").first, 201);
  ASSERT_EQ(admin.call("PUT", "/api/v1/projects/a/secrets/TOKEN", "very-secret-value", "application/octet-stream").first,
            200);

  struct Route {
    std::string method, path, body;
    std::string least;  // the least role that may
  };
  const std::string j = "/api/v1/jobs/" + std::to_string(job);
  const std::vector<Route> routes = {
      {"GET", "/api/v1/buckets/adata/objects", "", "viewer"},
      {"GET", "/api/v1/buckets/adata/objects/x.txt", "", "viewer"},
      {"PUT", "/api/v1/buckets/adata/objects/y.txt", "y", "developer"},
      {"DELETE", "/api/v1/buckets/adata/objects/y.txt", "", "developer"},
      {"GET", j, "", "viewer"},
      {"GET", j + "/logs", "", "viewer"},
      {"GET", j + "/metrics", "", "viewer"},
      {"POST", j + "/stop", "", "developer"},
      {"GET", "/api/v1/models/am", "", "viewer"},
      {"GET", "/api/v1/models/am/versions/1/file", "", "viewer"},
      {"PUT", "/api/v1/models/am/aliases/prod", R"({"version": 1})", "developer"},
      {"GET", "/api/v1/projects/a", "", "viewer"},
      {"GET", "/api/v1/projects/a/secrets", "", "admin"},
      {"PUT", "/api/v1/projects/a/secrets/OTHER", "v", "admin"},
      {"PUT", "/api/v1/projects/a/members/outsider", R"({"role": "none"})", "admin"},
  };
  std::map<std::string, std::unique_ptr<StudioApi>> as;
  for (const auto& user : {"viewer", "developer", "admin", "outsider"})
    as[user] = std::make_unique<StudioApi>(s.port, studio::create_token(dir, std::string(user) + "-t",
                                                                        studio::Scope::Admin, db, 0, user));
  auto rank = [&](const std::string& role) { return std::find(roles.begin(), roles.end(), role) - roles.begin(); };
  for (const auto& r : routes) {
    for (const auto& [user, api] : as) {
      const bool may = user != "outsider" && rank(user) >= rank(r.least);
      const auto [status, answer] = api->call(r.method, r.path, r.body, r.body.empty() || r.body[0] == '{' ?
                                                                            "application/json" : "text/plain");
      if (may)
        EXPECT_NE(status, 403) << user << " " << r.method << " " << r.path << ": " << answer.dump();
      else
        EXPECT_EQ(status, 403) << user << " " << r.method << " " << r.path << ": " << answer.dump();
    }
  }
  // The lists of the outsider hold nothing of project a.
  for (const char* list : {"jobs", "models", "buckets"}) {
    const json items = as["outsider"]->call("GET", std::string("/api/v1/") + list).second[list];
    EXPECT_TRUE(items.empty()) << list << ": " << items.dump();
  }
  // The secret's value is in no answer and no audit entry.
  const json audit = StudioApi(s.port, kiln::testing::create_token(dir, "ops", studio::Scope::Admin))
                         .call("GET", "/api/v1/audit?limit=1000").second;
  EXPECT_EQ(audit.dump().find("very-secret-value"), std::string::npos);
  EXPECT_EQ(as["admin"]->call("GET", "/api/v1/projects/a/secrets").second.dump().find("very-secret"), std::string::npos);
  EXPECT_EQ(as["admin"]->call("GET", j).second.dump().find("very-secret"), std::string::npos);
}

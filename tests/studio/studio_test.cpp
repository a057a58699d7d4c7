// Kiln Studio's first part over loopback: tokens and scopes, the audit log,
// the object store (atomic writes, checksums, ranges, pages, key validation),
// a restart that loses nothing, and `kiln store` as a user runs it.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <httplib.h>

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/studio.h"
#include "support/job_files.h"
#include "support/raw_connection.h"
#include "support/studio_fixture.h"

using namespace kiln;
using json = nlohmann::json;
using kiln::testing::fresh_dir;
using kiln::testing::text_of;

namespace {

// With a 1 MiB upload limit, so the test of oversized uploads stays small.
struct LimitedStudio : kiln::testing::Studio {
  explicit LimitedStudio(const std::string& dir) : kiln::testing::Studio(dir, 1 << 20) {}
  httplib::Client client(const std::string& token = "") const {
    httplib::Client c("127.0.0.1", port);
    c.set_url_encode(false);  // paths go as written, traversal attempts included
    if (!token.empty()) c.set_bearer_token_auth(token);
    return c;
  }
};
using Studio = LimitedStudio;

std::string error_of(const httplib::Result& r) { return json::parse(r->body).value("error", ""); }

}  // namespace

TEST(Studio, EveryEndpointButHealthNeedsATokenOfTheRightScope) {
  auto dir = fresh_dir("studio_auth");
  std::string reader = kiln::testing::create_token(dir, "reader", studio::Scope::Read);
  std::string writer = kiln::testing::create_token(dir, "ci", studio::Scope::Write);
  Studio s(dir);
  EXPECT_EQ(s.client().Get("/api/v1/health")->status, 200);
  auto anonymous = s.client().Get("/api/v1/buckets");
  EXPECT_EQ(anonymous->status, 401);
  EXPECT_NE(error_of(anonymous).find("kiln studio token create"), std::string::npos);
  EXPECT_EQ(s.client("kst_not_a_real_token").Get("/api/v1/buckets")->status, 401);
  EXPECT_EQ(s.client(reader).Get("/api/v1/buckets")->status, 200);
  auto refused = s.client(reader).Put("/api/v1/buckets/data", "", "text/plain");
  EXPECT_EQ(refused->status, 403);
  EXPECT_NE(error_of(refused).find("needs write"), std::string::npos) << refused->body;
  EXPECT_EQ(s.client(writer).Put("/api/v1/buckets/data", "", "text/plain")->status, 201);
  EXPECT_EQ(s.client(writer).Get("/api/v1/audit")->status, 403);  // admin only
  // Tokens are stored hashed: the secret is nowhere in the database.
  EXPECT_EQ(text_of(dir + "/studio.db").find(writer), std::string::npos);
  EXPECT_EQ(studio::revoke_tokens(dir, "ci", kiln::testing::test_database(dir)), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // the studio remembers a token for a second
  EXPECT_EQ(s.client(writer).Get("/api/v1/buckets")->status, 401);
}

// Tokens that expire, a rotation whose grace period lets clients move over,
// and the list an admin reads (no secrets in it).
TEST(Studio, TokensExpireAndRotateWithAGracePeriod) {
  auto dir = fresh_dir("studio_token_life");
  const std::string db = kiln::testing::test_database(dir);
  const std::string admin = kiln::testing::create_token(dir, "ops", studio::Scope::Admin);
  Studio s(dir);
  // Tokens made while the studio runs (as `kiln studio token create` does).
  const std::string brief = studio::create_token(dir, "brief", studio::Scope::Read, db, 1);
  const std::string ci = studio::create_token(dir, "ci", studio::Scope::Write, db, studio::parse_duration_ms("90d"));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto expired = s.client(brief).Get("/api/v1/buckets");
  EXPECT_EQ(expired->status, 401);
  EXPECT_NE(error_of(expired).find("token 'brief' expired at 20"), std::string::npos) << expired->body;
  EXPECT_NE(error_of(expired).find("kiln studio token rotate --name brief"), std::string::npos) << expired->body;
  EXPECT_EQ(s.client(ci).Get("/api/v1/buckets")->status, 200);

  // Rotating "ci" with an hour's grace: the new token has its scope, and the old one still works.
  const int64_t before = studio::now_ms();
  const std::string rotated = studio::rotate_token(dir, "ci", 0, studio::parse_duration_ms("1h"), db);
  EXPECT_NE(rotated, ci);
  EXPECT_EQ(s.client(rotated).Put("/api/v1/buckets/data", "", "text/plain")->status, 201);
  EXPECT_EQ(s.client(ci).Get("/api/v1/buckets")->status, 200);
  auto listed = json::parse(s.client(admin).Get("/api/v1/tokens")->body)["tokens"];
  ASSERT_EQ(listed.size(), 4u);
  EXPECT_EQ(listed[1]["name"], "brief");
  EXPECT_EQ(listed[1]["state"], "expired");
  EXPECT_EQ(listed[2]["state"], "live");  // the old "ci", in its grace period
  const int64_t grace_end = listed[2]["expires_ms"].get<int64_t>();
  EXPECT_GE(grace_end, before + 3600 * 1000);
  EXPECT_LE(grace_end, studio::now_ms() + 3600 * 1000);
  EXPECT_TRUE(listed[3]["expires_ms"].is_null());  // the new one never expires
  const std::string body = s.client(admin).Get("/api/v1/tokens")->body;
  for (const std::string& secret : {admin, brief, ci, rotated}) EXPECT_EQ(body.find(secret), std::string::npos);

  // Without a grace period the old tokens are revoked at once.
  const std::string again = studio::rotate_token(dir, "ci", 0, 0, db);
  EXPECT_EQ(s.client(ci).Get("/api/v1/buckets")->status, 401);
  EXPECT_EQ(s.client(rotated).Get("/api/v1/buckets")->status, 401);
  EXPECT_EQ(s.client(again).Get("/api/v1/buckets")->status, 200);
  EXPECT_THROW(studio::rotate_token(dir, "brief", 0, 0, db), Error);  // nothing live to rotate
  EXPECT_THROW(studio::parse_duration_ms("5q"), Error);
  EXPECT_EQ(studio::parse_duration_ms("12h"), 12 * 3600 * 1000);
}

TEST(Studio, WritesAreAudited) {
  auto dir = fresh_dir("studio_audit");
  std::string admin = kiln::testing::create_token(dir, "ops", studio::Scope::Admin);
  Studio s(dir);
  auto c = s.client(admin);
  ASSERT_EQ(c.Put("/api/v1/buckets/runs", "", "text/plain")->status, 201);
  ASSERT_EQ(c.Put("/api/v1/buckets/runs/objects/a.txt", "hello", "text/plain")->status, 201);
  ASSERT_EQ(c.Delete("/api/v1/buckets/runs/objects/missing")->status, 404);
  auto log = json::parse(c.Get("/api/v1/audit")->body)["entries"];
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[0]["method"], "DELETE");
  EXPECT_EQ(log[0]["status"], 404);
  EXPECT_EQ(log[1]["path"], "/api/v1/buckets/runs/objects/a.txt");
  EXPECT_EQ(log[2]["token"], "ops");
}

TEST(Studio, ObjectsRoundTripWithChecksumsRangesAndPages) {
  auto dir = fresh_dir("studio_objects");
  std::string token = kiln::testing::create_token(dir, "w", studio::Scope::Write);
  Studio s(dir);
  auto c = s.client(token);
  ASSERT_EQ(c.Put("/api/v1/buckets/data", "", "text/plain")->status, 201);
  std::string bytes(100000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7);
  auto put = c.Put("/api/v1/buckets/data/objects/train/images.bin", bytes, "application/octet-stream");
  ASSERT_EQ(put->status, 201) << put->body;
  std::string sha = json::parse(put->body)["sha256"];
  auto got = c.Get("/api/v1/buckets/data/objects/train/images.bin");
  ASSERT_EQ(got->status, 200);
  EXPECT_EQ(got->body, bytes);
  EXPECT_EQ(got->get_header_value("X-Kiln-Sha256"), sha);
  auto part = c.Get("/api/v1/buckets/data/objects/train/images.bin", {{"Range", "bytes=10-19"}});
  ASSERT_EQ(part->status, 206);
  EXPECT_EQ(part->body, bytes.substr(10, 10));
  EXPECT_EQ(part->get_header_value("Content-Range"), "bytes 10-19/100000");
  EXPECT_EQ(c.Get("/api/v1/buckets/data/objects/train/images.bin", {{"Range", "bytes=200000-"}})->status, 416);
  // A damaged upload (its checksum does not match) changes nothing.
  auto damaged = c.Put("/api/v1/buckets/data/objects/train/images.bin", {{"X-Kiln-Sha256", std::string(64, '0')}},
                       "other bytes", "application/octet-stream");
  EXPECT_EQ(damaged->status, 400);
  EXPECT_NE(error_of(damaged).find("damaged"), std::string::npos);
  EXPECT_EQ(c.Get("/api/v1/buckets/data/objects/train/images.bin")->body, bytes);
  // Listing by prefix, in pages.
  for (int i = 0; i < 5; ++i) c.Put("/api/v1/buckets/data/objects/val/" + std::to_string(i), "x", "text/plain");
  auto page = json::parse(c.Get("/api/v1/buckets/data/objects?prefix=val/&max_keys=2")->body);
  ASSERT_EQ(page["objects"].size(), 2u);
  EXPECT_EQ(page["objects"][0]["key"], "val/0");
  EXPECT_EQ(page["next_start_after"], "val/1");
  auto last = json::parse(c.Get("/api/v1/buckets/data/objects?prefix=val/&max_keys=2&start_after=val/3")->body);
  ASSERT_EQ(last["objects"].size(), 1u);
  EXPECT_EQ(last["next_start_after"], "");
  EXPECT_EQ(c.Delete("/api/v1/buckets/data/objects/val/0")->status, 204);
  EXPECT_EQ(c.Get("/api/v1/buckets/data/objects/val/0")->status, 404);
  EXPECT_EQ(c.Delete("/api/v1/buckets/data")->status, 400);  // not empty
  // No temporary file is left behind by any of it.
  EXPECT_TRUE(std::filesystem::is_empty(dir + "/objects/data/.incoming"));
}

TEST(Studio, KeysListInByteOrderWhateverTheirCharacters) {
  auto dir = fresh_dir("studio_key_order");
  std::string token = kiln::testing::create_token(dir, "w", studio::Scope::Write);
  Studio s(dir);
  auto c = s.client(token);
  ASSERT_EQ(c.Put("/api/v1/buckets/data", "", "text/plain")->status, 201);
  // A locale's collation would put "a" before "B" and "e" before "é" before "f".
  for (const char* key : {"k/f", "k/%C3%A9", "k/a", "k/B", "k/e", "kz"})
    ASSERT_EQ(c.Put(std::string("/api/v1/buckets/data/objects/") + key, "x", "text/plain")->status, 201) << key;
  std::vector<std::string> keys;
  std::string after;
  do {  // pages of two, each starting after the last
    auto page = json::parse(c.Get("/api/v1/buckets/data/objects?prefix=k/&max_keys=2&start_after=" + after)->body);
    for (const auto& o : page["objects"]) keys.push_back(o["key"].get<std::string>());
    after = page["next_start_after"].get<std::string>();
  } while (!after.empty() && keys.size() < 10);
  EXPECT_EQ(keys, (std::vector<std::string>{"k/B", "k/a", "k/e", "k/f", "k/\xc3\xa9"}));
}

TEST(Studio, OneStudioServesADataDirectoryAndADatabase) {
  auto dir = fresh_dir("studio_single");
  auto refused = [](const studio::StudioOptions& o) {
    try {
      studio::StudioServer second(o);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("it started");
  };
  {
    Studio first(dir);
    studio::StudioOptions o;
    o.data_dir = dir;
    o.database = kiln::testing::test_database(dir);
    const std::string why = refused(o);
    EXPECT_NE(why.find("another studio serves the data directory"), std::string::npos) << why;
    EXPECT_NE(why.find("(pid " + std::to_string(::getpid()) + ")"), std::string::npos) << why;
    if (!o.database.empty()) {  // PostgreSQL: the database is claimed too, whatever the data directory
      o.data_dir = fresh_dir("studio_single_other");
      const std::string also = refused(o);
      EXPECT_NE(also.find("another studio uses the database"), std::string::npos) << also;
    }
  }
  Studio again(dir);  // once the first has stopped
  EXPECT_GT(again.port, 0);
}

TEST(Studio, ALostDatabaseConnectionIsMadeAgain) {
  auto dir = fresh_dir("studio_reconnect");
  const std::string database = kiln::testing::test_database(dir);
  if (database.empty()) GTEST_SKIP() << "PostgreSQL only (studio_tests_postgres)";
  const std::string token = kiln::testing::create_token(dir, "w", studio::Scope::Write);
  Studio s(dir);
  auto c = s.client(token);
  ASSERT_EQ(c.Put("/api/v1/buckets/before", "", "text/plain")->status, 201);
  // An administrator (or a server restart) ends the studio's session.
  PGconn* admin = PQconnectdb(database.c_str());
  PGresult* r = PQexec(admin, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                              "WHERE datname = current_database() AND pid <> pg_backend_pid()");
  ASSERT_EQ(PQresultStatus(r), PGRES_TUPLES_OK) << PQerrorMessage(admin);
  EXPECT_EQ(std::string(PQgetvalue(r, 0, 0)), "1");
  PQclear(r);
  PQfinish(admin);
  // The next requests go through on a new connection, which claims the database again.
  EXPECT_EQ(c.Put("/api/v1/buckets/after", "", "text/plain")->status, 201);
  EXPECT_EQ(json::parse(c.Get("/api/v1/buckets")->body)["buckets"], json::array({"after", "before"}));
  studio::StudioOptions o;
  o.data_dir = fresh_dir("studio_reconnect_other");
  o.database = database;
  try {
    studio::StudioServer second(o);
    ADD_FAILURE() << "a second studio took the database";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("another studio uses the database"), std::string::npos) << e.what();
  }
}

TEST(Studio, TheConsoleIsServedAtTheRootAndNothingOutsideIt) {
  auto dir = fresh_dir("studio_console");
  std::filesystem::create_directories(dir + "/console/assets");
  std::ofstream(dir + "/console/index.html") << "<title>console</title>";
  std::ofstream(dir + "/console/assets/app-1234.js") << "console.log(1)";
  std::ofstream(dir + "/secret.txt") << "not for the web";
  studio::StudioOptions o;
  o.data_dir = dir + "/data";
  o.port = 0;
  o.access_log = "";
  o.console_dir = dir + "/console";
  studio::StudioServer server(o);
  httplib::Client c("127.0.0.1", server.start());
  c.set_url_encode(false);
  auto index = c.Get("/");
  ASSERT_EQ(index->status, 200);
  EXPECT_EQ(index->body, "<title>console</title>");
  EXPECT_EQ(index->get_header_value("Content-Type"), "text/html; charset=utf-8");
  auto script = c.Get("/assets/app-1234.js");
  EXPECT_EQ(script->body, "console.log(1)");
  EXPECT_NE(script->get_header_value("Cache-Control").find("immutable"), std::string::npos);
  EXPECT_EQ(c.Get("/jobs/12")->body, "<title>console</title>");  // the console's own routes
  for (const char* escape : {"/../secret.txt", "/assets/../../secret.txt", "/%2e%2e/secret.txt"})
    EXPECT_EQ(c.Get(escape)->body.find("not for the web"), std::string::npos) << escape;
  EXPECT_EQ(c.Post("/", "x", "text/plain")->status, 405);
  EXPECT_EQ(c.Get("/api/v1/whoami")->status, 401);  // the API still needs its token
  const std::string token = studio::create_token(o.data_dir, "viewer", studio::Scope::Read);
  c.set_bearer_token_auth(token);
  auto me = json::parse(c.Get("/api/v1/whoami")->body);
  EXPECT_EQ(me["name"], "viewer");
  EXPECT_EQ(me["scope"], "read");
}

TEST(Studio, AnUnreachableDatabaseIsAClearErrorThatHidesThePassword) {
  studio::StudioOptions o;
  o.data_dir = fresh_dir("studio_bad_db");
  o.database = "postgresql://kiln:s3cret@127.0.0.1:1/studio?connect_timeout=5";
  try {
    studio::StudioServer server(o);
    ADD_FAILURE() << "a studio started without its database";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot connect to the studio database postgresql://kiln:***@127.0.0.1:1/studio"),
              std::string::npos) << what;
    EXPECT_NE(what.find("check that the server runs"), std::string::npos) << what;
    EXPECT_EQ(what.find("s3cret"), std::string::npos) << what;
  }
}

TEST(Studio, KeysCannotLeaveTheirBucket) {
  auto dir = fresh_dir("studio_keys");
  std::string token = kiln::testing::create_token(dir, "w", studio::Scope::Write);
  Studio s(dir);
  auto c = s.client(token);
  ASSERT_EQ(c.Put("/api/v1/buckets/data", "", "text/plain")->status, 201);
  for (std::string key : {"../escape", "a/../../b", "a//b", "./x", "a/%2e%2e/b", "%2e%2e", "a%5cb"}) {
    auto r = c.Put("/api/v1/buckets/data/objects/" + key, "x", "text/plain");
    EXPECT_EQ(r->status, 400) << key;
  }
  EXPECT_EQ(c.Put("/api/v1/buckets/Bad_Name", "", "text/plain")->status, 400);
  EXPECT_EQ(c.Put("/api/v1/buckets/nope/objects/x", "x", "text/plain")->status, 404);
  auto big = c.Put("/api/v1/buckets/data/objects/big", std::string(2 << 20, 'x'), "application/octet-stream");
  EXPECT_EQ(big->status, 413);
  EXPECT_NE(big->body.find("--max-upload-mb"), std::string::npos);
}

TEST(Studio, ARestartLosesNothing) {
  auto dir = fresh_dir("studio_restart");
  std::string token = kiln::testing::create_token(dir, "w", studio::Scope::Write);
  {
    Studio s(dir);
    auto c = s.client(token);
    ASSERT_EQ(c.Put("/api/v1/buckets/ckpt", "", "text/plain")->status, 201);
    ASSERT_EQ(c.Put("/api/v1/buckets/ckpt/objects/w1/epoch-1.safetensors", "weights", "text/plain")->status, 201);
  }
  Studio again(dir);
  auto got = again.client(token).Get("/api/v1/buckets/ckpt/objects/w1/epoch-1.safetensors");
  ASSERT_EQ(got->status, 200);
  EXPECT_EQ(got->body, "weights");
}

TEST(Studio, StoreCommandsCopyTreesBothWaysAndSkipWhatIsUnchanged) {
  auto dir = fresh_dir("studio_cli");
  std::string token = kiln::testing::create_token(dir, "w", studio::Scope::Write);
  Studio s(dir);
  std::string local = dir + "/local";
  std::filesystem::create_directories(local + "/train/a");
  std::ofstream(local + "/train/a/x.txt") << "first";
  std::ofstream(local + "/train/y.txt") << "second";
  auto run = [&](const std::string& args) { return s.kiln(token, dir, "store " + args); };
  auto mb = run("mb studio://data");
  ASSERT_EQ(mb.first, 0) << mb.second;
  auto up = run("cp " + local + "/train studio://data/sets/train");
  ASSERT_EQ(up.first, 0) << up.second;
  EXPECT_NE(up.second.find("uploaded 2 files"), std::string::npos) << up.second;
  auto again = run("cp " + local + "/train studio://data/sets/train");
  EXPECT_NE(again.second.find("uploaded 0 files to studio://data/sets/train (2 unchanged"), std::string::npos)
      << again.second;
  auto ls = run("ls studio://data/sets/");
  EXPECT_NE(ls.second.find("sets/train/a/x.txt"), std::string::npos) << ls.second;
  EXPECT_NE(ls.second.find("2 objects, 11 bytes"), std::string::npos) << ls.second;
  auto down = run("cp studio://data/sets/train " + dir + "/back");
  ASSERT_EQ(down.first, 0) << down.second;
  EXPECT_EQ(text_of(dir + "/back/a/x.txt"), "first");
  EXPECT_EQ(text_of(dir + "/back/y.txt"), "second");
  // sync --delete mirrors a tree both ways, several files at once.
  std::filesystem::remove(local + "/train/y.txt");
  std::ofstream(local + "/train/z.txt") << "third";
  auto mirrored = run("sync " + local + "/train studio://data/sets/train --delete -j 3");
  ASSERT_EQ(mirrored.first, 0) << mirrored.second;
  EXPECT_NE(mirrored.second.find("uploaded 1 file to studio://data/sets/train (1 unchanged, skipped; 0.0 MB; "
                                 "removed 1 the source lacks)"),
            std::string::npos)
      << mirrored.second;
  auto back = run("sync studio://data/sets/train " + dir + "/back --delete");
  ASSERT_EQ(back.first, 0) << back.second;
  EXPECT_FALSE(std::filesystem::exists(dir + "/back/y.txt"));
  EXPECT_EQ(text_of(dir + "/back/z.txt"), "third");
  // Many uploads at once: each request's writes stay in its own transaction.
  for (int k = 0; k < 24; ++k) {
    std::filesystem::create_directories(local + "/many/d" + std::to_string(k % 6));
    std::ofstream(local + "/many/d" + std::to_string(k % 6) + "/f" + std::to_string(k)) << k;
  }
  auto many = run("cp " + local + "/many studio://data/many -j 8");
  ASSERT_EQ(many.first, 0) << many.second;
  EXPECT_NE(many.second.find("uploaded 24 files"), std::string::npos) << many.second;
  auto many_back = run("cp studio://data/many " + dir + "/many -j 8");
  ASSERT_EQ(many_back.first, 0) << many_back.second;
  EXPECT_EQ(text_of(dir + "/many/d5/f23"), "23");
  ASSERT_EQ(run("rm -r studio://data/many/").first, 0);
  auto rm = run("rm -r studio://data/sets/");
  EXPECT_NE(rm.second.find("removed 2 objects"), std::string::npos) << rm.second;
  auto missing = run("cp studio://data/nothing-here " + dir + "/none");
  EXPECT_NE(missing.first, 0);
  EXPECT_NE(missing.second.find("nothing in the store"), std::string::npos) << missing.second;
  auto no_token = std::system((std::string(KILN_CLI) + " store ls studio:// > /dev/null 2>&1").c_str());
  EXPECT_NE(no_token, 0);
}

// A file larger than one request goes up in parts; an upload stopped half
// way resumes with the parts the studio already has.
TEST(Studio, LargeFilesGoUpInPartsAndAnInterruptedUploadResumes) {
  auto dir = fresh_dir("studio_parts");
  std::string token = kiln::testing::create_token(dir, "w", studio::Scope::Write);
  Studio s(dir);  // one request carries at most 1 MiB
  std::string bytes((size_t{5} << 20) / 2, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 13);
  std::ofstream(dir + "/big.bin", std::ios::binary) << bytes;
  ASSERT_EQ(s.kiln(token, dir, "store mb studio://data").first, 0);
  auto whole = s.kiln(token, dir, "store cp " + dir + "/big.bin studio://data/big.bin", "KILN_STORE_PART_MB=4");
  EXPECT_NE(whole.first, 0);
  EXPECT_NE(whole.second.find("--max-upload-mb"), std::string::npos) << whole.second;
  const std::string parts = "KILN_STORE_PART_MB=0.5 XDG_CACHE_HOME=" + dir + "/cache";
  auto stopped = s.kiln(token, dir, "store cp " + dir + "/big.bin studio://data/big.bin",
                        parts + " KILN_STORE_STOP_AFTER_PARTS=2");
  EXPECT_NE(stopped.first, 0);
  EXPECT_NE(stopped.second.find("stopped after 2 parts"), std::string::npos) << stopped.second;
  auto resumed = s.kiln(token, dir, "store cp " + dir + "/big.bin studio://data/big.bin", parts);
  ASSERT_EQ(resumed.first, 0) << resumed.second;
  EXPECT_NE(resumed.second.find("2 of 5 parts were already in the store"), std::string::npos) << resumed.second;
  auto back = s.kiln(token, dir, "store cp studio://data/big.bin " + dir + "/back.bin");
  ASSERT_EQ(back.first, 0) << back.second;
  EXPECT_TRUE(text_of(dir + "/back.bin") == bytes) << "the joined object differs from the file";
  EXPECT_TRUE(std::filesystem::is_empty(dir + "/cache/kiln/uploads")) << "the finished upload's state is removed";
  EXPECT_TRUE(std::filesystem::is_empty(dir + "/objects/data/.uploads")) << "the parts are removed";
}

// The data directory on a 1 MiB tmpfs: an upload that does not fit is
// refused with 507 saying so, leaves nothing behind, and what was stored
// before stays readable. Needs root (mount); skipped otherwise.
// Peak resident memory of this process, in MiB.
double peak_rss_mib() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

// A token is judged on the request's head: an upload without one is refused
// before its body is read. An accepted upload streams to disk: a 160 MiB
// object costs the studio no memory of its size, and arrives intact.
TEST(Studio, UploadsAreJudgedBeforeTheirBodyAndStreamedToDisk) {
  auto dir = fresh_dir("studio_stream");
  std::string token = kiln::testing::create_token(dir, "w", studio::Scope::Write);
  kiln::testing::Studio s(dir, size_t{1} << 30);
  {
    kiln::testing::RawConnection c(s.port);
    const auto t0 = std::chrono::steady_clock::now();
    c.send("PUT /api/v1/buckets/data/objects/big HTTP/1.1\r\nHost: x\r\nContent-Length: 262144000\r\n\r\n");
    const std::string answer = c.read_until("\r\n\r\n");
    EXPECT_NE(answer.find(" 401 "), std::string::npos) << "no answer before the body: " << answer;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  }
  httplib::Client c("127.0.0.1", s.port);
  c.set_bearer_token_auth(token);
  c.set_write_timeout(60, 0);
  c.set_read_timeout(60, 0);
  ASSERT_EQ(c.Put("/api/v1/buckets/data", "", "text/plain")->status, 201);
  const size_t size = size_t{160} << 20;
  studio::Sha256 sha;
  std::string block(1 << 20, '\0');
  for (size_t k = 0; k < block.size(); ++k) block[k] = static_cast<char>((k * 131) >> 3);
  for (size_t at = 0; at < size; at += block.size()) sha.update(block.data(), block.size());
  const std::string digest = sha.hex();
  const double before = peak_rss_mib();
  auto put = c.Put("/api/v1/buckets/data/objects/big", size,
                   [&](size_t offset, size_t length, httplib::DataSink& sink) {
                     const size_t at = offset % block.size();
                     return sink.write(block.data() + at, std::min(length, block.size() - at));
                   },
                   "application/octet-stream");
  ASSERT_TRUE(put);
  ASSERT_EQ(put->status, 201) << put->body;
  EXPECT_EQ(json::parse(put->body)["sha256"], digest);
  EXPECT_EQ(json::parse(put->body)["size"], size);
  const double grown = peak_rss_mib() - before;
  EXPECT_LT(grown, 48.0) << "the studio held the 160 MiB upload in memory";
  std::printf("peak RSS grew %.1f MiB for a 160 MiB upload\n", grown);
  auto stat = c.Get("/api/v1/buckets/data/objects/big?stat=1");
  EXPECT_EQ(json::parse(stat->body)["sha256"], digest);
  EXPECT_TRUE(std::filesystem::is_empty(dir + "/objects/data/.incoming"));
  {  // A client that leaves halfway leaves no partial file behind.
    kiln::testing::RawConnection cut(s.port);
    cut.send("PUT /api/v1/buckets/data/objects/half HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token +
             "\r\nContent-Length: 1048576\r\n\r\n" + std::string(100000, 'h'));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  bool clean = false;
  for (int i = 0; i < 50 && !clean; ++i) {
    clean = std::filesystem::is_empty(dir + "/objects/data/.incoming");
    if (!clean) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(clean) << "a cut upload left its partial file";
  EXPECT_EQ(c.Get("/api/v1/buckets/data/objects/half")->status, 404);
}

TEST(Studio, AFullDiskRefusesTheUploadAndCorruptsNothing) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
  auto dir = fresh_dir("studio_full");
  if (std::system(("mount -t tmpfs -o size=1m tmpfs " + dir + " 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here";
  struct Unmount {
    std::string dir;
    ~Unmount() { (void)std::system(("umount " + dir).c_str()); }
  } unmount{dir};
  std::string token = kiln::testing::create_token(dir, "w", studio::Scope::Write);
  {
    kiln::testing::Studio s(dir);
    httplib::Client c("127.0.0.1", s.port);
    c.set_bearer_token_auth(token);
    ASSERT_EQ(c.Put("/api/v1/buckets/data", "", "text/plain")->status, 201);
    std::string small(100 * 1024, 's');
    ASSERT_EQ(c.Put("/api/v1/buckets/data/objects/small", small, "application/octet-stream")->status, 201);
    auto full = c.Put("/api/v1/buckets/data/objects/big", std::string(2 << 20, 'b'), "application/octet-stream");
    EXPECT_EQ(full->status, 507) << full->body;
    EXPECT_NE(full->body.find("disk is full"), std::string::npos) << full->body;
    EXPECT_EQ(c.Get("/api/v1/buckets/data/objects/big")->status, 404);
    EXPECT_EQ(c.Get("/api/v1/buckets/data/objects/small")->body, small);
    EXPECT_TRUE(std::filesystem::is_empty(dir + "/objects/data/.incoming"));
    EXPECT_EQ(c.Put("/api/v1/buckets/data/objects/again", "fits", "text/plain")->status, 201);
  }
}

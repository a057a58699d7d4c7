// kiln launch and the per-rank logs: ranks get the launcher variables, their
// lines land in rank-K.log with time, host and rank, a failing rank stops
// the others and is reported with its last lines, and kiln logs reads,
// filters, merges and follows the logs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "kiln/error.h"
#include "kiln/launch.h"
#include "support/error_message.h"
#include "support/job_files.h"

using namespace kiln;
using namespace kiln::testing;
using namespace std::chrono_literals;

namespace {

dist::LaunchOptions options(int n, const std::string& dir, const std::string& script) {
  dist::LaunchOptions o;
  o.nproc = n;
  o.log_dir = dir;
  o.command = {"sh", "-c", script};
  o.echo = false;
  o.grace = 2s;
  return o;
}

TEST(Launch, RanksGetTheirPlaceAndEachLineIsLoggedWithTimeHostAndRank) {
  const std::string dir = fresh_dir("launch_place");
  const int code = dist::launch(options(
      3, dir, "echo place $RANK/$WORLD_SIZE local $LOCAL_RANK/$LOCAL_WORLD_SIZE at $MASTER_ADDR:$MASTER_PORT; echo oops >&2"));
  EXPECT_EQ(code, 0);
  auto files = dist::log_files(dir);
  ASSERT_EQ(files.size(), 3u);
  auto all = dist::read_logs(dir, {});
  ASSERT_EQ(all.size(), 6u);
  for (size_t i = 1; i < all.size(); ++i) EXPECT_LE(all[i - 1].time, all[i].time) << "not merged in time order";
  auto places = dist::read_logs(dir, {std::nullopt, "^place"});
  ASSERT_EQ(places.size(), 3u);
  for (const auto& l : places) {
    const std::string r = std::to_string(l.rank);
    EXPECT_EQ(l.text.rfind("place " + r + "/3 local " + r + "/3 at 127.0.0.1:", 0), 0u) << l.text;
    EXPECT_FALSE(l.host.empty());
  }
  auto rank2 = dist::read_logs(dir, {2, ""});
  ASSERT_EQ(rank2.size(), 2u);
  EXPECT_EQ(rank2[1].text, "oops");  // standard error is kept too
  EXPECT_THROW(dist::read_logs(dir, {7, ""}), Error);
  EXPECT_THROW(dist::read_logs(dir, {std::nullopt, "(unclosed"}), Error);
  std::filesystem::remove_all(dir);
}

TEST(Launch, AFailingRankStopsTheOthersAndIsReportedWithItsLastLines) {
  const std::string dir = fresh_dir("launch_fail");
  const auto start = std::chrono::steady_clock::now();
  ::testing::internal::CaptureStderr();
  const int code = dist::launch(options(
      3, dir, "if [ $RANK = 1 ]; then echo loading; echo 'boom: out of memory'; sleep 0.3; exit 3; fi; exec sleep 60"));
  const std::string report = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 3);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s) << "the other ranks were not stopped";
  EXPECT_NE(report.find("rank 1 (pid"), std::string::npos) << report;
  EXPECT_NE(report.find("exited with status 3; the other ranks were stopped"), std::string::npos) << report;
  EXPECT_NE(report.find("  boom: out of memory"), std::string::npos) << report;
  EXPECT_NE(report.find("rank-1.log"), std::string::npos) << report;
  std::filesystem::remove_all(dir);
}

TEST(Launch, ARankKilledBySignalAndACommandThatDoesNotExistAreReported) {
  const std::string dir = fresh_dir("launch_signal");
  ::testing::internal::CaptureStderr();
  int code = dist::launch(options(2, dir, "if [ $RANK = 0 ]; then kill -9 $$; fi; exec sleep 60"));
  std::string report = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 128 + 9);
  EXPECT_NE(report.find("rank 0 (pid"), std::string::npos) << report;
  EXPECT_NE(report.find("was killed by signal 9"), std::string::npos) << report;
  dist::LaunchOptions missing = options(1, dir, "");
  missing.command = {"/nonexistent/trainer"};
  ::testing::internal::CaptureStderr();
  code = dist::launch(missing);
  report = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 127);
  EXPECT_NE(report.find("cannot run '/nonexistent/trainer'"), std::string::npos) << report;
  std::filesystem::remove_all(dir);
}

TEST(Launch, BadOptionsSayWhatToFix) {
  dist::LaunchOptions o;
  o.nproc = 2;
  EXPECT_THROW(dist::launch(o), Error);  // no command
  o.command = {"true"};
  o.nnodes = 2;
  o.node_rank = 1;
  const std::string said = message_of([&] { dist::launch(o); });  // two hosts, no master
  EXPECT_NE(said.find("--master HOST:PORT"), std::string::npos) << said;
  o.master = "nohost";
  EXPECT_THROW(dist::launch(o), Error);
  o.node_rank = 2;
  EXPECT_THROW(dist::launch(o), Error);
}

TEST(Launch, FollowingTheLogsPrintsLinesAsTheyAreWritten) {
  const std::string dir = fresh_dir("launch_follow");
  {
    std::ofstream(dir + "/rank-0.log") << dist::format_log_line({"2026-01-01T00:00:01.000000Z", "h", 0, "first"}) << "\n";
    std::ofstream(dir + "/rank-1.log") << dist::format_log_line({"2026-01-01T00:00:00.500000Z", "h", 1, "earlier"}) << "\n";
  }
  std::vector<std::string> seen;
  std::thread writer([&] {
    std::this_thread::sleep_for(300ms);
    std::ofstream(dir + "/rank-1.log", std::ios::app)
        << dist::format_log_line({"2026-01-01T00:00:02.000000Z", "h", 1, "late line"}) << "\n"
        << dist::format_log_line({"2026-01-01T00:00:03.000000Z", "h", 1, "partial"});  // no newline yet
  });
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  dist::follow_logs(
      dir, {}, [&](const dist::LogLine& l) { seen.push_back(l.text); },
      [&] { return seen.size() < 3 && std::chrono::steady_clock::now() < give_up; }, 50ms);
  writer.join();
  EXPECT_EQ(seen, (std::vector<std::string>{"earlier", "first", "late line"}));
  std::filesystem::remove_all(dir);
}

}  // namespace

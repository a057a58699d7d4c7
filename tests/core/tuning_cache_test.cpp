// The tuning cache keeps a machine's measured decisions for the next
// process: what one instance remembers, another on the same file reads;
// torn or foreign lines are skipped; processes appending at once lose
// nothing; KILN_CACHE_DIR moves it, and "off" keeps it in the process;
// old builds' files are cleared away.
#include "core/tuning_cache.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {
using kiln::tuning::TuningCache;

std::string fresh_folder(const std::string& name) {
  const std::string dir = std::filesystem::temp_directory_path() / (name + "-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(TuningCache, TheNextProcessReadsWhatThisOneRemembered) {
  const std::string file = fresh_folder("kiln-tuning") + "/sub/tuning.txt";  // the folder is made when needed
  {
    TuningCache first(file);
    EXPECT_FALSE(first.lookup("conv_algorithm", "t2,1,3").has_value());
    first.remember("conv_algorithm", "t2,1,3", "direct:1e-05,patch_gemm:9e-06");
    first.remember("depthwise_join", "t2,5", "0");
    first.remember("depthwise_join", "t2,5", "1");  // measured again: the last answer stands
    EXPECT_EQ(first.lookup("depthwise_join", "t2,5"), "1");
  }
  {  // a torn line (a process stopped mid-write) and a foreign one
    std::ofstream out(file, std::ios::app);
    out << "conv_algorithm t2,9\nnot a tuning line at all\n";
  }
  TuningCache next(file);
  EXPECT_EQ(next.lookup("conv_algorithm", "t2,1,3"), "direct:1e-05,patch_gemm:9e-06");
  EXPECT_EQ(next.lookup("depthwise_join", "t2,5"), "1");
  EXPECT_FALSE(next.lookup("conv_algorithm", "t2,9").has_value());
  EXPECT_FALSE(next.lookup("depthwise_join", "t4,5").has_value()) << "another thread count is another key";
}

TEST(TuningCache, ProcessesTuningAtOnceLoseNothing) {
  const std::string file = fresh_folder("kiln-tuning-append") + "/tuning.txt";
  std::vector<std::thread> writers;
  for (int w = 0; w < 4; ++w)
    writers.emplace_back([&, w] {
      TuningCache own(file);  // as another process would hold it
      for (int i = 0; i < 200; ++i) own.remember("t", std::to_string(w) + "," + std::to_string(i), std::to_string(i));
    });
  for (auto& t : writers) t.join();
  TuningCache reader(file);
  for (int w = 0; w < 4; ++w)
    for (int i = 0; i < 200; ++i)
      ASSERT_EQ(reader.lookup("t", std::to_string(w) + "," + std::to_string(i)), std::to_string(i)) << w << " " << i;
}

TEST(TuningCache, TheEnvironmentPlacesItOrTurnsItOff) {
  const char* before = std::getenv("KILN_CACHE_DIR");
  const std::string saved = before ? before : "";
  const std::string folder = fresh_folder("kiln-tuning-env");
  // Another build's file untouched for 40 days goes when this build's is
  // made; a recent one, and files that are not tuning files, stay.
  const auto now = std::filesystem::file_time_type::clock::now();
  for (const char* name : {"tuning-old.txt", "tuning-recent.txt", "notes.txt"}) {
    std::ofstream(folder + "/" + name) << "t k v\n";
    if (std::string(name) != "tuning-recent.txt")
      std::filesystem::last_write_time(folder + "/" + name, now - std::chrono::hours(24 * 40));
  }
  setenv("KILN_CACHE_DIR", folder.c_str(), 1);
  TuningCache& placed = kiln::tuning::machine_cache();
  EXPECT_EQ(placed.file(), folder + "/tuning-" + kiln::tuning::machine_fingerprint() + ".txt");
  placed.remember("test", "key", "value");
  EXPECT_TRUE(std::filesystem::exists(placed.file()));
  EXPECT_FALSE(std::filesystem::exists(folder + "/tuning-old.txt"));
  EXPECT_TRUE(std::filesystem::exists(folder + "/tuning-recent.txt"));
  EXPECT_TRUE(std::filesystem::exists(folder + "/notes.txt"));
  setenv("KILN_CACHE_DIR", "off", 1);
  TuningCache& off = kiln::tuning::machine_cache();
  EXPECT_EQ(off.file(), "");
  off.remember("test", "in-memory", "1");
  EXPECT_EQ(off.lookup("test", "in-memory"), "1");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(folder), std::filesystem::directory_iterator()), 3)
      << "off wrote a file";
  if (before)
    setenv("KILN_CACHE_DIR", saved.c_str(), 1);
  else
    unsetenv("KILN_CACHE_DIR");
}

}  // namespace

// Many small files through the store as shards: kiln store pack and unpack
// as a user runs them, and a 2-rank job whose recipe streams the shards
// straight from the store.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/data.h"
#include "kiln/studio.h"
#include "support/job_files.h"
#include "support/studio_fixture.h"

using namespace kiln;
using json = nlohmann::json;
using kiln::testing::fresh_dir;
using kiln::testing::Studio;
using kiln::testing::text_of;

namespace {

// The first `count` images of a Fashion-MNIST split as PNG files in class
// folders: DIR/CLASS/NNNNN.png.
void write_pngs(const std::string& split, int count, const std::string& dir) {
  auto set = data::load_fashion_mnist(split);
  const float* pixels = set.inputs.data<float>();
  const int64_t* labels = set.labels.data<int64_t>();
  for (int i = 0; i < count; ++i) {
    Tensor image = Tensor::empty({28, 28, 1}, DType::UInt8);
    for (int p = 0; p < 784; ++p) image.data<uint8_t>()[p] = static_cast<uint8_t>(pixels[i * 784 + p] * 255 + 0.5f);
    auto png = data::encode_png(image);
    const std::string folder = dir + "/class" + std::to_string(labels[i]);
    std::filesystem::create_directories(folder);
    char name[16];
    std::snprintf(name, sizeof name, "/%05d.png", i);
    std::ofstream(folder + name, std::ios::binary).write(reinterpret_cast<const char*>(png.data()), png.size());
  }
}

}  // namespace

TEST(StudioShards, PackUnpackAndAJobThatStreamsTheShards) {
  if (!std::filesystem::exists(data::kFashionMnistDir)) GTEST_SKIP() << "apt-get install dataset-fashion-mnist";
  auto dir = fresh_dir("studio_shards");
  Studio s(dir);
  const std::string token = kiln::testing::create_token(dir, "ci", studio::Scope::Write);
  auto run = [&](const std::string& args) { return s.kiln(token, dir, args); };
  write_pngs("train", 1200, dir + "/fm/train");
  write_pngs("test", 300, dir + "/fm/test");
  ASSERT_EQ(run("store mb studio://data").first, 0);
  auto packed = run("store pack " + dir + "/fm/train studio://data/shards/fm-train --labels-from-folders --shard-size 200KB");
  ASSERT_EQ(packed.first, 0) << packed.second;
  EXPECT_NE(packed.second.find("packed 1200 samples (1200 files) into"), std::string::npos) << packed.second;
  auto test_packed = run("store pack " + dir + "/fm/test studio://data/shards/fm-test --labels-from-folders");
  ASSERT_EQ(test_packed.first, 0) << test_packed.second;
  // Shards of about the size asked, and an index that counts their samples.
  auto listing = run("store ls studio://data/shards/fm-train");
  EXPECT_NE(listing.second.find("shards/fm-train-000000.tar"), std::string::npos) << listing.second;
  EXPECT_NE(listing.second.find("shards/fm-train-index.json"), std::string::npos) << listing.second;
  ASSERT_EQ(run("store cp studio://data/shards/fm-train-index.json " + dir + "/index.json").first, 0);
  json index = json::parse(text_of(dir + "/index.json"));
  ASSERT_GE(index["shards"].size(), 4u) << index.dump();
  int64_t samples = 0;
  for (const auto& shard : index["shards"]) {
    samples += shard["samples"].get<int64_t>();
    EXPECT_LT(shard["bytes"].get<int64_t>(), 300 * 1024) << shard.dump();
  }
  EXPECT_EQ(samples, 1200);
  EXPECT_EQ(index["classes"].size(), 10u);

  // Unpacked: the same files, byte for byte, with their classes beside them.
  auto unpacked = run("store unpack studio://data/shards/fm-train " + dir + "/back -j 3");
  ASSERT_EQ(unpacked.first, 0) << unpacked.second;
  int compared = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir + "/fm/train")) {
    if (!e.is_regular_file()) continue;
    const std::string relative = std::filesystem::relative(e.path(), dir + "/fm/train").string();
    ASSERT_EQ(text_of(dir + "/back/" + relative), text_of(e.path().string())) << relative;
    const std::string cls = relative.substr(5, relative.find('/') - 5);  // classN/...
    EXPECT_EQ(text_of(dir + "/back/" + relative.substr(0, relative.size() - 3) + "cls"),
              cls) << relative;
    ++compared;
  }
  EXPECT_EQ(compared, 1200);

  // A 2-rank job whose recipe streams the shards from the store.
  char last[16];
  std::snprintf(last, sizeof last, "%06zu", index["shards"].size() - 1);
  std::ofstream(dir + "/recipe.yaml")
      << "model: mlp\nmodel_config: {hidden: [128]}\n"
         "dataset: {shards: 'studio://data/shards/fm-train-{000000.."
      << last << "}.tar', test_shards: 'studio://data/shards/fm-test-{000000..000000}.tar', channels: 1}\n"
         "optimizer: {name: sgd, lr: 0.1, momentum: 0.9}\nepochs: 3\nbatch_size: 32\nseed: 0\n";
  std::ofstream(dir + "/job.yaml") << "name: shards\nrecipe: " << dir << "/recipe.yaml\nnproc: 2\n"
                                      "output: studio://runs/shards\nenv: {KILN_NUM_THREADS: '1'}\n";
  auto job = run("job submit " + dir + "/job.yaml --wait");
  ASSERT_EQ(job.first, 0) << job.second << text_of(dir + "/jobs/1/launcher.log");
  auto logs = run("job logs 1 --rank 0 --grep 'test accuracy'");
  const size_t at = logs.second.find("test accuracy ");
  ASSERT_NE(at, std::string::npos) << logs.second;
  EXPECT_GT(std::stod(logs.second.substr(at + 14)), 60.0) << logs.second;  // 1,200 images, 3 epochs
}

TEST(StudioShards, BadShardsAndSourcesAreRefusedClearly) {
  auto dir = fresh_dir("studio_shards_bad");
  Studio s(dir);
  const std::string token = kiln::testing::create_token(dir, "ci", studio::Scope::Write);
  auto run = [&](const std::string& args) { return s.kiln(token, dir, args); };
  ASSERT_EQ(run("store mb studio://data").first, 0);
  auto missing = run("store pack " + dir + "/nothing studio://data/shards/x");
  EXPECT_NE(missing.first, 0);
  EXPECT_NE(missing.second.find("is not a folder"), std::string::npos) << missing.second;
  std::filesystem::create_directories(dir + "/flat");
  std::ofstream(dir + "/flat/README") << "no extension";
  auto no_field = run("store pack " + dir + "/flat studio://data/shards/x");
  EXPECT_NE(no_field.second.find("has no extension"), std::string::npos) << no_field.second;
  auto none = run("store unpack studio://data/shards/absent " + dir + "/out");
  EXPECT_NE(none.first, 0);
  EXPECT_NE(none.second.find("no shards studio://data/shards/absent-NNNNNN.tar"), std::string::npos) << none.second;
  auto bad_size = run("store pack " + dir + "/flat studio://data/shards/x --shard-size lots");
  EXPECT_NE(bad_size.second.find("'lots' is not a size"), std::string::npos) << bad_size.second;
  // A shard made elsewhere whose member would climb out of the destination.
  data::ShardWriter w(dir + "/evil", 1 << 20, [](const std::string&, int64_t, int64_t) {});
  w.add("../escaped", {{"txt", "gotcha"}});
  w.finish();
  ASSERT_EQ(run("store cp " + dir + "/evil-000000.tar studio://data/shards/evil-000000.tar").first, 0);
  auto evil = run("store unpack studio://data/shards/evil " + dir + "/out");
  EXPECT_NE(evil.first, 0);
  EXPECT_NE(evil.second.find("would land outside"), std::string::npos) << evil.second;
  EXPECT_FALSE(std::filesystem::exists(dir + "/escaped.txt"));
}

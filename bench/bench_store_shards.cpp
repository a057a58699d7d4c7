// Many small files through the studio's store: Fashion-MNIST as PNG files
// (70,000 by default, in class folders) moved into the store and back file
// by file (kiln store cp -j 4 each way), then as packed shards (kiln store
// pack and unpack -j 4), in the same run against the same studio. Goal: the
// packed way at least 5x faster.
// Usage: bench_store_shards KILN_EXECUTABLE [FILES]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "kiln/data.h"
#include "kiln/studio.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

// The first `count` Fashion-MNIST images (train, then test) as DIR/CLASS/NNNNN.png.
void write_pngs(int count, const std::string& dir) {
  int written = 0;
  for (const char* split : {"train", "test"}) {
    auto set = data::load_fashion_mnist(split);
    const float* pixels = set.inputs.data<float>();
    const int64_t* labels = set.labels.data<int64_t>();
    for (int64_t i = 0; i < set.inputs.shape()[0] && written < count; ++i, ++written) {
      Tensor image = Tensor::empty({28, 28, 1}, DType::UInt8);
      for (int p = 0; p < 784; ++p) image.data<uint8_t>()[p] = static_cast<uint8_t>(pixels[i * 784 + p] * 255 + 0.5f);
      auto png = data::encode_png(image);
      const std::string folder = dir + "/" + std::to_string(labels[i]);
      fs::create_directories(folder);
      char name[32];
      std::snprintf(name, sizeof name, "/%s-%05lld.png", split, static_cast<long long>(i));
      std::ofstream(folder + name, std::ios::binary).write(reinterpret_cast<const char*>(png.data()), png.size());
    }
  }
}

// Seconds `kiln ARGS` takes; exits when it fails.
double timed(const std::string& env, const std::string& kiln, const std::string& args) {
  const auto start = std::chrono::steady_clock::now();
  const std::string command = env + " " + kiln + " " + args + " > /dev/null";
  if (std::system(command.c_str()) != 0) {
    std::fprintf(stderr, "failed: kiln %s\n", args.c_str());
    std::exit(1);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s KILN_EXECUTABLE [FILES]\n", argv[0]);
    return 2;
  }
  const std::string kiln = argv[1];
  const int files = argc > 2 ? std::atoi(argv[2]) : 70000;
  const std::string dir = fs::temp_directory_path() / ("kiln_bench_shards_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  write_pngs(files, dir + "/png");
  studio::StudioOptions o;
  o.data_dir = dir + "/studio";
  o.port = 0;
  o.access_log = "";
  studio::StudioServer studio(o);
  const int port = studio.start();
  const std::string env = "KILN_STUDIO_URL=http://127.0.0.1:" + std::to_string(port) +
                          " KILN_STUDIO_TOKEN=" + studio::create_token(o.data_dir, "bench", studio::Scope::Write);
  timed(env, kiln, "store mb studio://bench");
  const double up_files = timed(env, kiln, "store cp " + dir + "/png studio://bench/files -j 4");
  const double down_files = timed(env, kiln, "store cp studio://bench/files " + dir + "/files-back -j 4");
  const double up_shards = timed(env, kiln, "store pack " + dir + "/png studio://bench/shards/fm -j 4");
  const double down_shards = timed(env, kiln, "store unpack studio://bench/shards/fm " + dir + "/shards-back -j 4");
  const double by_file = up_files + down_files, packed = up_shards + down_shards;
  std::printf("%d PNG files into the store and back\n", files);
  std::printf("  file by file   %7.2f s (up %.2f s, down %.2f s)\n", by_file, up_files, down_files);
  std::printf("  packed shards  %7.2f s (up %.2f s, down %.2f s)\n", packed, up_shards, down_shards);
  std::printf("  packed is %.1fx faster (goal: at least 5x)\n", by_file / packed);
  studio.stop();
  fs::remove_all(dir);
  return 0;
}

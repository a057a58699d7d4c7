// A main() for the fuzz targets where libFuzzer is not available (GCC builds,
// CI): runs every seed file given, then a fixed number of deterministic
// mutations of them (bit flips, byte changes, truncations, insertions,
// duplicated spans). Usage: fuzz_X ITERATIONS SEED_FILE...
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s ITERATIONS SEED_FILE...\n", argv[0]);
    return 2;
  }
  long iterations = std::atol(argv[1]);
  std::vector<std::vector<uint8_t>> seeds;
  for (int i = 2; i < argc; ++i) {
    std::ifstream f(argv[i], std::ios::binary);
    seeds.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(seeds.back().data(), seeds.back().size());
  }
  std::mt19937_64 rng(12345);
  for (long it = 0; it < iterations; ++it) {
    std::vector<uint8_t> d = seeds[rng() % seeds.size()];
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !d.empty(); ++e) {
      size_t at = rng() % d.size();
      switch (rng() % 5) {
        case 0: d[at] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
        case 1: d[at] = static_cast<uint8_t>(rng()); break;
        case 2: d.resize(at); break;
        case 3: d.insert(d.begin() + static_cast<long>(at), static_cast<uint8_t>(rng())); break;
        case 4: {
          size_t len = std::min<size_t>(1 + rng() % 16, d.size() - at);
          std::vector<uint8_t> span(d.begin() + static_cast<long>(at), d.begin() + static_cast<long>(at + len));
          d.insert(d.begin() + static_cast<long>(rng() % d.size()), span.begin(), span.end());
          break;
        }
      }
    }
    LLVMFuzzerTestOneInput(d.data(), d.size());
  }
  std::printf("%ld mutated inputs and %zu seeds: no crash\n", iterations, seeds.size());
  return 0;
}

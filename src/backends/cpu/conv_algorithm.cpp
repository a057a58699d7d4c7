#include "backends/cpu/conv_algorithm.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/cpu/blocked_depthwise.h"
#include "backends/cpu/blocked_pool.h"
#include "backends/cpu/gemm_tile.h"
#include "backends/cpu/patch_gemm_conv.h"
#include "backends/cpu/winograd_conv.h"
#include "core/tuning_cache.h"
#include "kiln/error.h"
#include "kiln/parallel.h"
#include "kiln/tensor.h"

namespace kiln::cpu {
namespace {

// Each run's time, timed in turns so that a busy moment on the machine
// slows them alike: a warm-up run each, then rounds that time every run in
// turn. The first run's figure is its best time; each other's is that times
// the median, over the rounds, of its time over the first's in the same
// round. Compared so, a choice does not hang on which run a quiet moment
// fell to: with each run's own best time, six processes chose four
// different sets of algorithms for SqueezeNet, and three processes
// disagreed on 15 of EfficientNet-V2-S's 33 timed layers (on 3-5 so). Short
// runs get more rounds, about 10 ms of them (at least 7, at most 25),
// runs up to 20 ms five, longer ones one (compiling a batch-64 ResNet
// took 20 s of timing before). `before_each` runs untimed before each.
std::vector<double> times_in_turns(const std::vector<std::function<void()>>& runs,
                                   const std::function<void()>& before_each = {}) {
  auto seconds = [&](const std::function<void()>& run) {
    if (before_each) before_each();
    auto t0 = std::chrono::steady_clock::now();
    run();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  double slowest = 0;
  for (const auto& run : runs) slowest = std::max(slowest, seconds(run));
  const int rounds = slowest > 0.02    ? 1
                     : slowest > 0.002 ? 5
                                       : std::clamp(static_cast<int>(0.01 / std::max(slowest, 1e-9)), 7, 25);
  std::vector<std::vector<double>> times(runs.size());
  for (int round = 0; round < rounds; ++round)
    for (size_t i = 0; i < runs.size(); ++i) times[i].push_back(seconds(runs[i]));
  std::vector<double> scores(runs.size());
  scores[0] = *std::min_element(times[0].begin(), times[0].end());
  for (size_t i = 1; i < runs.size(); ++i) {
    std::vector<double> ratios;
    for (int round = 0; round < rounds; ++round) ratios.push_back(times[i][round] / times[0][round]);
    std::nth_element(ratios.begin(), ratios.begin() + rounds / 2, ratios.end());
    scores[i] = scores[0] * ratios[rounds / 2];
  }
  return scores;
}

// Writes (zeros) or reads every value of a [n, planes, h, row] tensor,
// each thread taking a band of rows across every plane, as the layers
// around a timed one split their work (see timed_candidates).
void by_rows(float* data, int64_t n, int64_t planes, int64_t h, int64_t row, bool write) {
  std::atomic<float> sink{0.0f};
  parallel_for(n * h, 1, [&](int64_t lo, int64_t hi) {
    float sum = 0.0f;
    for (int64_t r = lo; r < hi; ++r)
      for (int64_t p = 0; p < planes; ++p) {
        float* at = data + (((r / h) * planes + p) * h + r % h) * row;
        if (write)
          std::fill(at, at + row, 0.0f);
        else
          sum = std::accumulate(at, at + row, sum);
      }
    sink.store(sum, std::memory_order_relaxed);
  });
}
// The same over a blocked convolution's input (or output).
void by_rows_of(const onednn::LayoutCall& call, float* data, bool input, bool write) {
  const onednn::ConvShape& s = call.shape;
  const int64_t block = std::max(input ? call.src_block : call.dst_block, 1);
  if (input) return by_rows(data, s.n, s.c / block, s.h, s.w * block, write);
  by_rows(data, s.n, s.o / block, s.oh, s.ow * block, write);
}

// Each algorithm's name, as KILN_CONV_ALGORITHM and the tuning cache write it.
constexpr std::pair<ConvAlgorithm, const char*> kAlgorithmNames[] = {{ConvAlgorithm::Direct, "direct"},
                                                                     {ConvAlgorithm::Winograd2x2, "winograd2x2"},
                                                                     {ConvAlgorithm::Winograd4x4, "winograd4x4"},
                                                                     {ConvAlgorithm::PatchGemm, "patch_gemm"},
                                                                     {ConvAlgorithm::Depthwise, "depthwise"}};

const char* algorithm_name(ConvAlgorithm a) {
  for (const auto& [algorithm, name] : kAlgorithmNames)
    if (algorithm == a) return name;
  return "?";
}

std::optional<ConvAlgorithm> algorithm_named(const std::string& text) {
  for (const auto& [algorithm, name] : kAlgorithmNames)
    if (text == name) return algorithm;
  return std::nullopt;
}

// KILN_CONV_ALGORITHM: the algorithm asked for, or none (timing decides).
std::optional<ConvAlgorithm> pinned_algorithm() {
  const char* env = std::getenv("KILN_CONV_ALGORITHM");
  if (!env || !*env) return std::nullopt;
  if (const std::optional<ConvAlgorithm> a = algorithm_named(env)) return a;
  KILN_FAIL("KILN_CONV_ALGORITHM=", env,
            " is not an algorithm: set direct, winograd2x2, winograd4x4, patch_gemm or depthwise, or unset it to time "
            "them");
}

// A decision's key in the machine's tuning cache (core/tuning_cache.h): the
// geometry and the thread count it was timed with.
std::string cache_key(const std::vector<int64_t>& fields) {
  std::string key = "t";
  key.append(std::to_string(get_num_threads()));
  for (int64_t f : fields) key.append(",").append(std::to_string(f));
  return key;
}

// Scores as the cache keeps them: "direct:1.2e-05,patch_gemm:9.8e-06".
std::string scores_text(const std::map<ConvAlgorithm, double>& scores) {
  std::string text;
  for (const auto& [algorithm, score] : scores) {
    char number[32];
    std::snprintf(number, sizeof number, "%.9g", score);
    text.append(text.empty() ? "" : ",").append(algorithm_name(algorithm)).append(":").append(number);
  }
  return text;
}

// The same read back; none where a name or number does not parse (a file
// from another build of Kiln), or where the candidates differ from `expected`.
std::optional<std::map<ConvAlgorithm, double>> scores_of(const std::string& text,
                                                         const std::vector<ConvAlgorithm>& expected) {
  std::map<ConvAlgorithm, double> scores;
  std::istringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos) return std::nullopt;
    const std::optional<ConvAlgorithm> algorithm = algorithm_named(item.substr(0, colon));
    char* end = nullptr;
    const double score = std::strtod(item.c_str() + colon + 1, &end);
    if (!algorithm || end == item.c_str() + colon + 1 || *end != '\0' || !(score > 0)) return std::nullopt;
    scores[*algorithm] = score;
  }
  if (scores.size() != expected.size()) return std::nullopt;
  for (ConvAlgorithm a : expected)
    if (!scores.count(a)) return std::nullopt;
  return scores;
}

// A yes or no timed once per machine: from the tuning cache, else decide()
// and remember it there.
bool cached_decision(const char* table, const std::vector<int64_t>& fields, const std::function<bool()>& decide) {
  tuning::TuningCache& cache = tuning::machine_cache();
  const std::string key = cache_key(fields);
  if (const std::optional<std::string> known = cache.lookup(table, key); known && (*known == "1" || *known == "0"))
    return *known == "1";
  const bool yes = decide();
  cache.remember(table, key, yes ? "1" : "0");
  return yes;
}

// Each candidate's time for this call, in seconds, with what it costs
// beyond that counted in (below), timed once per geometry and batch size
// (not per thread count: one shape gets one algorithm, so its answers round
// alike whichever thread runs it).
std::map<ConvAlgorithm, double> timed_candidates(const onednn::LayoutCall& call, bool pooled, bool winograd,
                                                 bool patch_gemm, bool depthwise) {
  const onednn::ConvShape& s = call.shape;
  static std::mutex mu;
  static std::map<std::vector<int64_t>, std::map<ConvAlgorithm, double>> timed;
  // clang-format off
  const std::vector<int64_t> key{s.n, s.c, s.h, s.w, s.o, s.kh, s.kw, s.sh, s.sw, s.ph, s.pw, s.dh, s.dw, s.groups,
                                 call.src_block, call.dst_block, call.bias, call.relu, call.residual, call.hardswish,
                                 call.swish, call.cap > 0, pooled, winograd, patch_gemm, depthwise};
  // clang-format on
  std::lock_guard<std::mutex> lock(mu);
  auto it = timed.find(key);
  if (it != timed.end()) return it->second;
  // Timed by an earlier process on this machine and build.
  const bool winograd4 = winograd && s.oh >= 8 && s.ow >= 8;
  std::vector<ConvAlgorithm> expected{ConvAlgorithm::Direct};
  if (patch_gemm) expected.push_back(ConvAlgorithm::PatchGemm);
  if (depthwise) expected.push_back(ConvAlgorithm::Depthwise);
  if (winograd) expected.push_back(ConvAlgorithm::Winograd2x2);
  if (winograd4) expected.push_back(ConvAlgorithm::Winograd4x4);
  tuning::TuningCache& cache = tuning::machine_cache();
  if (const std::optional<std::string> known = cache.lookup("conv_algorithm", cache_key(key)))
    if (std::optional<std::map<ConvAlgorithm, double>> scores = scores_of(*known, expected))
      return timed[key] = *scores;
  // Each on the real sizes (any values: the time does not depend on them).
  // In a network, megabytes of weights arrive from memory, the other layers
  // having pushed them out of the caches; timed warm, Winograd's larger
  // transformed weights would look cheaper than they are. So where the
  // weights are large, the caches are flushed before each run.
  Tensor x = zeros({s.n * s.c * s.h * s.w}), w = zeros({s.o * (s.c / s.groups) * s.kh * s.kw}), b = zeros({s.o});
  Tensor y = zeros({s.n * s.o * s.oh * s.ow});
  const float* bias = call.bias ? b.data<float>() : nullptr;
  const bool cold = w.numel() * 4 >= (2 << 20);
  Tensor flush = cold ? Tensor::empty({int64_t{48} << 18}) : Tensor();  // 48 MB, more than the last-level cache
  struct Candidate {
    ConvAlgorithm algorithm;
    int64_t weight_bytes;
    std::function<void()> run;
    double best = 1e30;
  };
  std::vector<Candidate> candidates;
  // With a 2x2 max pool after it (pooled), Winograd takes the pool into its
  // output transform, and the others are timed with the pool's pass after
  // them, the ReLU moved onto it: each as the graph will run it.
  onednn::LayoutCall unpooled = call;
  unpooled.relu = call.relu && !pooled;
  Tensor pool_out = pooled ? zeros({s.n * s.o * (s.oh / 2) * (s.ow / 2)}) : Tensor();
  auto pool_after = [&] {
    if (pooled)
      max_pool_blocked(y.data<float>(), pool_out.data<float>(), s.n, s.o, s.oh, s.ow, s.oh / 2, s.ow / 2,
                       call.dst_block, PoolWindow{2, 2, 2, 2, 0, 0, 1, 1}, false, call.relu);
  };
  // oneDNN's kernel as the graph runs it: on weights reordered once into its
  // own layout (LayoutPass::prepare_constant_weights). Given them plain, it
  // reorders them on every call, and that time made it lose where it was
  // the fastest (a 32 -> 64 3x3 at 14x14: 25 us in the network, 32 timed).
  onednn::LayoutCall direct = unpooled;
  const int64_t prepared_bytes = onednn::prepared_weights_bytes(call);
  Tensor prepared = prepared_bytes > 0 ? Tensor::empty({prepared_bytes}, DType::UInt8) : Tensor();
  if (prepared_bytes > 0) {
    onednn::prepare_weights(call, w.data<float>(), prepared.raw_data());
    direct.prepared_weights = true;
  }
  const float* direct_weights = prepared_bytes > 0 ? static_cast<const float*>(prepared.raw_data()) : w.data<float>();
  candidates.push_back({ConvAlgorithm::Direct, w.numel() * 4, [&] {
                          onednn::conv_forward_layout(direct, x.data<float>(), direct_weights, bias, y.data<float>());
                          pool_after();
                        }});
  Tensor packed = patch_gemm ? zeros({patch_gemm_weights_size(s)}) : Tensor();
  if (patch_gemm)
    candidates.push_back({ConvAlgorithm::PatchGemm, packed.numel() * 4, [&] {
                            patch_gemm_conv(unpooled, x.data<float>(), packed.data<float>(), bias, y.data<float>());
                            pool_after();
                          }});
  Tensor taps = depthwise ? zeros({blocked_depthwise_weights_size(call)}) : Tensor();
  if (depthwise)
    candidates.push_back({ConvAlgorithm::Depthwise, taps.numel() * 4, [&] {
                            const float* t = taps.data<float>();
                            blocked_depthwise_conv(unpooled, x.data<float>(), t, bias, y.data<float>());
                            pool_after();
                          }});
  Tensor u2 = winograd ? zeros({winograd_weights_size(s, 2)}) : Tensor();
  // F(4x4) on an output under 8x8 (winograd4 above) computes at least a
  // third of its tiles' outputs for nothing, and its buffers and weights,
  // 36/16 and 4x the size, cost a small network more memory than it saves time.
  Tensor u4 = winograd4 ? zeros({winograd_weights_size(s, 4)}) : Tensor();
  for (int tile : {2, 4})
    if (tile == 2 ? winograd : winograd4)
      candidates.push_back({tile == 2 ? ConvAlgorithm::Winograd2x2 : ConvAlgorithm::Winograd4x4,
                            (tile == 2 ? u2 : u4).numel() * 4, [&, tile] {
                              winograd_conv(s, tile, call.src_block, x.data<float>(),
                                            (tile == 2 ? u2 : u4).data<float>(), (pooled ? pool_out : y).data<float>(),
                                            {bias, call.relu, call.residual, pooled, call.swish});
                            }});
  // As in a network, each run's input was just written by the layer before
  // and its output is read by the layer after (that read is timed with it),
  // each thread taking a band of rows across every channel, as the patch
  // GEMMs, the depthwise kernel and the pools split their work. A candidate
  // that splits its work otherwise reads, and leaves, half its data in the
  // other core's cache, which its time alone misses: oneDNN's kernel for a
  // 3 -> 32 stem at 224x224 took 98 us alone against the patch GEMM's 111,
  // but 133 + 75 with the depthwise layer after it against 111 + 51.
  Tensor& out = pooled ? pool_out : y;
  const int64_t out_h = pooled ? s.oh / 2 : s.oh, out_w = pooled ? s.ow / 2 : s.ow;
  const int64_t in_planes = call.src_block ? s.c / call.src_block : s.c, in_row = s.w * std::max(call.src_block, 1);
  const int64_t out_planes = call.dst_block ? s.o / call.dst_block : s.o, out_row = out_w * std::max(call.dst_block, 1);
  std::vector<std::function<void()>> runs;
  for (const Candidate& c : candidates)
    runs.push_back([&, run = c.run] {
      run();
      by_rows(out.data<float>(), s.n, out_planes, out_h, out_row, false);
    });
  const std::vector<double> best_times = times_in_turns(runs, [&] {
    if (cold) std::memset(flush.raw_data(), 0, static_cast<size_t>(flush.numel()) * 4);
    by_rows(x.data<float>(), s.n, in_planes, s.h, in_row, true);
  });
  for (size_t i = 0; i < candidates.size(); ++i) candidates[i].best = best_times[i];
  // The others must beat oneDNN's kernel by 3% (they need scratch, and
  // Winograd rounds differently). Timed warm, weights larger than the
  // direct kernel's are charged the time to read the extra bytes from
  // memory (at 10 GB/s), which that timing misses; timed cold, the read is
  // in the time already. (Charged there too, against oneDNN timed on plain
  // weights, it kept ResNet-18's 512-channel 3x3s off Winograd; with
  // oneDNN timed as it runs, ResNet-18 and -34 went 10.2 -> 9.1 and
  // 17.5 -> 15.5 ms.)
  std::map<ConvAlgorithm, double> scores;
  for (const Candidate& c : candidates) {
    double score = c.best;
    // (The depthwise kernel on a wide image need only match oneDNN's: it
    // splits its rows as the layers around it do, which oneDNN's does not.)
    const bool rows_alike = c.algorithm == ConvAlgorithm::Depthwise && blocked_depthwise_splits_rows(call);
    if (c.algorithm != ConvAlgorithm::Direct && !rows_alike) score *= 1.03;
    if (!cold) score += static_cast<double>(std::max<int64_t>(0, c.weight_bytes - candidates[0].weight_bytes)) / 10e9;
    scores[c.algorithm] = score;
  }
  cache.remember("conv_algorithm", cache_key(key), scores_text(scores));
  return timed[key] = scores;
}

// Winograd keeps the layout, and its epilogue does bias, residual and ReLU
// only (no cap); the patch GEMM says what it takes (patch_gemm_applies).
bool winograd_takes(const onednn::LayoutCall& call) {
  return call.kind == onednn::ConvPass::Forward && call.src_block == call.dst_block && !call.hardswish &&
         !call.hardsigmoid && (!call.swish || gemm::swish_in_epilogue) && call.cap <= 0 &&
         winograd_applies(call.shape, call.src_block);
}

// A run of call by `algorithm` from x into y, on zero weights laid out as
// that algorithm reads them (kept in `weights`).
std::function<void()> conv_run(const onednn::LayoutCall& call, ConvAlgorithm algorithm, const float* x,
                               const float* bias, float* y, Tensor& weights) {
  const onednn::ConvShape& s = call.shape;
  switch (algorithm) {
    case ConvAlgorithm::PatchGemm:
      weights = zeros({patch_gemm_weights_size(s)});
      return [=, w = weights.data<float>()] { patch_gemm_conv(call, x, w, bias, y); };
    case ConvAlgorithm::Depthwise:
      weights = zeros({blocked_depthwise_weights_size(call)});
      return [=, w = weights.data<float>()] { blocked_depthwise_conv(call, x, w, bias, y); };
    case ConvAlgorithm::Winograd2x2:
    case ConvAlgorithm::Winograd4x4: {
      const int tile = algorithm == ConvAlgorithm::Winograd2x2 ? 2 : 4;
      weights = zeros({winograd_weights_size(s, tile)});
      return [=, w = weights.data<float>()] {
        winograd_conv(s, tile, call.src_block, x, w, y, {bias, call.relu, call.residual, false, call.swish});
      };
    }
    case ConvAlgorithm::Direct:
      break;
  }
  Tensor plain = zeros({s.o * (s.c / s.groups) * s.kh * s.kw});
  onednn::LayoutCall direct = call;
  if (const int64_t bytes = onednn::prepared_weights_bytes(call); bytes > 0) {
    weights = Tensor::empty({bytes}, DType::UInt8);
    onednn::prepare_weights(call, plain.data<float>(), weights.raw_data());
    direct.prepared_weights = true;
  } else {
    weights = plain;
  }
  return [=, w = static_cast<const float*>(weights.raw_data())] { onednn::conv_forward_layout(direct, x, w, bias, y); };
}

// The timing behind depthwise_join_pays.
bool time_depthwise_join(const onednn::LayoutCall& call, const onednn::LayoutCall* expand,
                         const onednn::LayoutCall* project) {
  // The two layers as the graph would run them apart, each by the
  // algorithm it would take alone, and joined.
  const onednn::LayoutCall& first = expand ? *expand : call;
  const onednn::LayoutCall& second = project ? *project : call;
  const onednn::ConvShape &in = first.shape, &out = second.shape;
  Tensor x = zeros({in.n * in.c * in.h * in.w}), between = zeros({in.n * in.o * in.oh * in.ow});
  Tensor y = zeros({out.n * out.o * out.oh * out.ow}), bias = zeros({std::max({in.o, out.o, call.shape.c})});
  auto bias_of = [&](const onednn::LayoutCall& c) { return c.bias ? bias.data<float>() : nullptr; };
  Tensor first_weights, second_weights, taps = zeros({blocked_depthwise_weights_size(call)});
  const std::function<void()> apart[] = {conv_run(first, fastest_conv_algorithm(first), x.data<float>(), bias_of(first),
                                                  between.data<float>(), first_weights),
                                         conv_run(second, fastest_conv_algorithm(second), between.data<float>(),
                                                  bias_of(second), y.data<float>(), second_weights)};
  Tensor panels = zeros({patch_gemm_weights_size((expand ? expand : project)->shape)});
  DepthwiseChain chain{call, taps.data<float>(), bias_of(call)};
  if (expand) chain.expand = expand, chain.expand_panels = panels.data<float>(), chain.expand_bias = bias_of(*expand);
  if (project)
    chain.project = project, chain.project_panels = panels.data<float>(), chain.project_bias = bias_of(*project);
  // Each with its input just written and its output read after, as in a
  // network (timed_candidates).
  auto then_read = [&](const std::function<void()>& run) {
    return std::function<void()>([&, run] {
      run();
      by_rows_of(second, y.data<float>(), false, false);
    });
  };
  const std::vector<double> t =
      times_in_turns({then_read([&] { depthwise_chain_conv(chain, x.data<float>(), y.data<float>()); }), then_read([&] {
                        apart[0]();
                        apart[1]();
                      })},
                     [&] { by_rows_of(first, x.data<float>(), true, true); });
  return t[0] <= t[1] * 1.03;
}

// The timing behind blocked_beats_plain.
bool time_blocked_against_plain(const onednn::LayoutCall& call) {
  onednn::LayoutCall plain = call;
  plain.src_block = plain.dst_block = 0;
  plain.prepared_weights = false;
  const onednn::ConvShape& s = call.shape;
  onednn::LayoutCall blocked = call;
  blocked.prepared_weights = false;
  Tensor x = zeros({s.n * s.c * s.h * s.w}), w = zeros({s.o * (s.c / s.groups) * s.kh * s.kw}), b = zeros({s.o});
  Tensor y = zeros({s.n * s.o * s.oh * s.ow});
  const float* bias = call.bias ? b.data<float>() : nullptr;
  auto run = [&](const onednn::LayoutCall& c) {
    return [&, c] { onednn::conv_forward_layout(c, x.data<float>(), w.data<float>(), bias, y.data<float>()); };
  };
  const std::vector<double> t = times_in_turns({run(blocked), run(plain)});
  return t[0] <= t[1];
}

}  // namespace

int64_t own_weights_size(ConvAlgorithm algorithm, const onednn::LayoutCall& call) {
  switch (algorithm) {
    case ConvAlgorithm::Winograd2x2: return winograd_weights_size(call.shape, 2);
    case ConvAlgorithm::Winograd4x4: return winograd_weights_size(call.shape, 4);
    case ConvAlgorithm::PatchGemm: return patch_gemm_weights_size(call.shape);
    case ConvAlgorithm::Depthwise: return blocked_depthwise_weights_size(call);
    case ConvAlgorithm::Direct: break;
  }
  KILN_FAIL("own_weights_size: oneDNN's direct kernel reads its own weight layout (onednn::prepare_weights)");
}

void own_weights(ConvAlgorithm algorithm, const onednn::LayoutCall& call, const float* w, float* out) {
  switch (algorithm) {
    case ConvAlgorithm::Winograd2x2: return winograd_weights(call.shape, 2, w, out);
    case ConvAlgorithm::Winograd4x4: return winograd_weights(call.shape, 4, w, out);
    case ConvAlgorithm::PatchGemm: return patch_gemm_weights(call.shape, call.src_block, w, out);
    case ConvAlgorithm::Depthwise: return blocked_depthwise_weights(call, w, out);
    case ConvAlgorithm::Direct: break;
  }
  KILN_FAIL("own_weights: oneDNN's direct kernel reads its own weight layout (onednn::prepare_weights)");
}

bool conv_algorithm_is_timed(const onednn::LayoutCall& call) {
  return (winograd_takes(call) || patch_gemm_applies(call) || blocked_depthwise_applies(call)) &&
         onednn::conv_layout_is_fast(call);
}

bool depthwise_join_pays(const onednn::LayoutCall& call, const onednn::LayoutCall* expand,
                         const onednn::LayoutCall* project) {
  KILN_CHECK((expand == nullptr) != (project == nullptr), "depthwise_join_pays: give the expansion or the projection");
  if (pinned_algorithm()) return true;
  static std::mutex mu;
  static std::map<std::vector<int64_t>, bool> decided;
  std::vector<int64_t> key;
  for (const onednn::LayoutCall* c : {&call, expand, project}) {
    if (!c) {
      key.push_back(-1);
      continue;
    }
    const onednn::ConvShape& s = c->shape;
    key.insert(key.end(), {s.n,     s.c,     s.h,         s.w,          s.o,      s.kh,      s.kw,         s.sh,
                           s.sw,    s.ph,    s.pw,        s.dh,         s.dw,     s.groups,  c->src_block, c->dst_block,
                           c->bias, c->relu, c->residual, c->hardswish, c->swish, c->cap > 0});
  }
  std::lock_guard<std::mutex> lock(mu);  // (held while timing: two timings at once would skew both)
  auto it = decided.find(key);
  if (it != decided.end()) return it->second;
  return decided[key] =
             cached_decision("depthwise_join", key, [&] { return time_depthwise_join(call, expand, project); });
}

ConvAlgorithm fastest_conv_algorithm(const onednn::LayoutCall& call, bool pooled, const ConvNeighbours& neighbours) {
  const bool winograd = winograd_takes(call), patch_gemm = patch_gemm_applies(call);
  const bool depthwise = blocked_depthwise_applies(call);
  if (!(winograd || patch_gemm || depthwise)) return ConvAlgorithm::Direct;
  // From one block size to the other, or for groups of a few channels,
  // oneDNN has no fast kernel.
  if (!onednn::conv_layout_is_fast(call))
    return patch_gemm ? ConvAlgorithm::PatchGemm : depthwise ? ConvAlgorithm::Depthwise : ConvAlgorithm::Direct;
  if (const std::optional<ConvAlgorithm> pinned = pinned_algorithm()) {
    const bool applies = *pinned == ConvAlgorithm::Direct || (*pinned == ConvAlgorithm::PatchGemm   ? patch_gemm
                                                              : *pinned == ConvAlgorithm::Depthwise ? depthwise
                                                                                                    : winograd);
    if (applies) return *pinned;
  }
  const ConvNeighbours& n = neighbours;
  if (n.pointwise_before && pointwise_depthwise_applies(*n.pointwise_before, call) &&
      depthwise_join_pays(call, n.pointwise_before, nullptr))
    return ConvAlgorithm::Depthwise;
  if (patch_gemm && ((n.depthwise_after && pointwise_depthwise_applies(call, *n.depthwise_after) &&
                      depthwise_join_pays(*n.depthwise_after, &call, nullptr)) ||
                     (n.depthwise_before && depthwise_pointwise_applies(*n.depthwise_before, call) &&
                      depthwise_join_pays(*n.depthwise_before, nullptr, &call))))
    return ConvAlgorithm::PatchGemm;
  ConvAlgorithm choice = ConvAlgorithm::Direct;
  double best = 1e30;
  for (const auto& [algorithm, score] : timed_candidates(call, pooled, winograd, patch_gemm, depthwise))
    if (score < best) choice = algorithm, best = score;
  return choice;
}

bool blocked_beats_plain(const onednn::LayoutCall& call) {
  onednn::LayoutCall plain = call;
  plain.src_block = plain.dst_block = 0;
  plain.prepared_weights = false;
  if (!onednn::conv_layout_is_fast(plain)) return true;
  static std::mutex mu;
  static std::map<std::vector<int64_t>, bool> decided;
  const onednn::ConvShape& s = call.shape;
  const std::vector<int64_t> key{s.n,  s.c,  s.h,  s.w,  s.o,  s.kh, s.kw, s.sh, s.sw, s.ph, s.pw, s.dh, s.dw, s.groups,
                                 call.src_block, call.dst_block, call.bias, call.relu, call.residual, call.hardswish,
                                 call.hardsigmoid, call.swish};
  std::lock_guard<std::mutex> lock(mu);
  auto it = decided.find(key);
  if (it != decided.end()) return it->second;
  return decided[key] = cached_decision("blocked_beats_plain", key, [&] { return time_blocked_against_plain(call); });
}

}  // namespace kiln::cpu

// `kiln generate`: greedy decoding with an LLM decoder exported with its
// key/value cache as inputs and outputs (onnxruntime-genai's and optimum's
// form: input_ids, attention_mask, past_key_values.N.key/value in;
// logits, present.N.key/value out), token ids in and out, timed.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <sstream>

#include "cli_checks.h"
#include "kiln/kiln.h"
#include "kiln/profiler.h"
#include "kiln/runtime.h"

namespace kiln::cli {
namespace {

std::vector<int64_t> parse_tokens(const std::string& text) {
  std::vector<int64_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    int64_t id = -1;
    try {
      id = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    KILN_CHECK(used == item.size() && id >= 0, "--prompt: '", text,
               "' should be comma-separated token ids (integers from 0), like 1,450,3681");
    ids.push_back(id);
  }
  KILN_CHECK(!ids.empty(), "--prompt is empty: give the prompt's token ids, like 1,450,3681");
  return ids;
}

// The model's inputs and outputs by role.
struct DecoderIo {
  size_t ids = 0, logits = 0;
  int mask = -1, positions = -1;
  std::vector<std::pair<size_t, size_t>> caches;  // (past input, present output)
};

int find(const std::vector<TensorInfo>& infos, const std::string& name) {
  for (size_t i = 0; i < infos.size(); ++i)
    if (infos[i].name == name) return static_cast<int>(i);
  return -1;
}

DecoderIo decoder_io(const InferenceSession& s) {
  DecoderIo io;
  const int ids = find(s.inputs(), "input_ids"), logits = find(s.outputs(), "logits");
  KILN_CHECK(ids >= 0 && logits >= 0,
             "generate: the model needs an input 'input_ids' and an output 'logits', as LLM "
             "decoders exported with their key/value cache have (onnxruntime-genai's or optimum's export)");
  io.ids = static_cast<size_t>(ids);
  io.logits = static_cast<size_t>(logits);
  io.mask = find(s.inputs(), "attention_mask");
  io.positions = find(s.inputs(), "position_ids");
  const std::string past = "past_key_values", present = "present";
  for (size_t i = 0; i < s.inputs().size(); ++i) {
    const TensorInfo& in = s.inputs()[i];
    if (in.name.rfind(past, 0) != 0) continue;
    const int out = find(s.outputs(), present + in.name.substr(past.size()));
    KILN_CHECK(out >= 0, "generate: the model's cache input '", in.name, "' has no output '", present,
               in.name.substr(past.size()), "' to feed it from");
    KILN_CHECK(in.shape_known && in.shape.size() == 4, "generate: the cache input ", in.str(),
               " is not [batch, heads, past length, head size]");
    io.caches.emplace_back(i, static_cast<size_t>(out));
  }
  const size_t known = 1 + (io.mask >= 0) + (io.positions >= 0) + io.caches.size();
  KILN_CHECK(known == s.inputs().size(),
             "generate: the model has inputs other than input_ids, attention_mask, "
             "position_ids and past_key_values.*; it is not a decoder this command can drive");
  return io;
}

Tensor int_tensor(const std::vector<int64_t>& v, DType dtype) {
  return from_vector(v, {1, static_cast<int64_t>(v.size())}).to(dtype);
}

struct Generation {
  std::vector<int64_t> tokens;
  double prefill_ms = 0;
  std::vector<double> step_ms;
};

// A static cache holds a multiple of this many positions, grown when full.
constexpr int64_t kCacheChunk = 64;

// Greedy decoding. Growing: each step's past is the last present, a
// position longer each token. Static: the caches hold a fixed number of
// positions (zeros past the tokens so far) and the attention mask is as
// long, ones then zeros, so every step has the same shapes and runs the
// same graph, as GroupQueryAttention's shared past and present buffers
// allow (onnxruntime-genai's static cache); nullopt where the model's
// present is not as long as its past (a cache that grows by concatenation)
// or its first step fails with one.
std::optional<Generation> generate(InferenceSession& session, const DecoderIo& io, const std::vector<int64_t>& prompt,
                                   int count, int64_t eos, bool static_cache) {
  const auto& infos = session.inputs();
  std::vector<Tensor> inputs(infos.size());
  for (const auto& [in, out] : io.caches) {
    const auto& s = infos[in].shape;
    KILN_CHECK(s[1] > 0 && s[3] > 0, "generate: the cache input ", infos[in].str(),
               " must give its heads and head size");
    inputs[in] = zeros({1, s[1], 0, s[3]}, infos[in].dtype);
  }
  Generation g;
  std::vector<int64_t> step = prompt;
  int64_t seen = 0, capacity = 0;
  while (static_cast<int>(g.tokens.size()) < count) {
    const auto t0 = std::chrono::steady_clock::now();
    inputs[io.ids] = int_tensor(step, infos[io.ids].dtype);
    const int64_t total = seen + static_cast<int64_t>(step.size());
    if (static_cache && total > capacity) {
      const int64_t grown = (total + kCacheChunk - 1) / kCacheChunk * kCacheChunk;
      for (const auto& [in, out] : io.caches) {
        const Shape& s = inputs[in].shape();
        inputs[in] = concat({inputs[in], zeros({1, s[1], grown - capacity, s[3]}, inputs[in].dtype())}, 2);
      }
      capacity = grown;
    }
    if (io.mask >= 0) {
      const auto mask = static_cast<size_t>(io.mask);
      inputs[mask] = static_cache ? pad(ones({1, total}), {0, capacity - total}).to(infos[mask].dtype)
                                  : ones({1, total}, infos[mask].dtype);
    }
    if (io.positions >= 0) {
      std::vector<int64_t> at(step.size());
      for (size_t i = 0; i < at.size(); ++i) at[i] = seen + static_cast<int64_t>(i);
      inputs[static_cast<size_t>(io.positions)] = int_tensor(at, infos[static_cast<size_t>(io.positions)].dtype);
    }
    std::vector<Tensor> outputs;
    try {
      outputs = session.run(inputs);
    } catch (const std::exception& e) {
      // A static cache's first step may ask for more positions than the
      // model holds (its capacity rounded up): the caller grows one instead.
      if (static_cache && seen == 0) return std::nullopt;
      KILN_FAIL("generate: the step to ", total, " tokens failed: ", e.what(),
                total > static_cast<int64_t>(prompt.size())
                    ? "\n(a decoder holds a limited number of positions, as its rotary tables' rows: generate fewer "
                      "tokens than that, prompt included)"
                    : "");
    }
    if (static_cache && seen == 0)
      for (const auto& [in, out] : io.caches)
        if (outputs[out].dim() != 4 || outputs[out].shape()[2] != capacity) return std::nullopt;
    const Tensor last = outputs[io.logits].select(1, outputs[io.logits].shape()[1] - 1).reshape({-1});
    const int64_t next = argmax(last, 0).item<int64_t>();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (seen == 0) {
      g.prefill_ms = ms;
    } else {
      g.step_ms.push_back(ms);
    }
    for (const auto& [in, out] : io.caches) inputs[in] = outputs[out];
    g.tokens.push_back(next);
    seen = total;
    step = {next};
    if (next == eos) break;
  }
  return g;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

void add_generate_command(CLI::App& app) {
  struct Args {
    std::string model, prompt, profile, cache = "auto";
    int tokens = 16, threads = 0, warmup = 1, level = 2;
    int64_t eos = -1;
    bool adapt_threads = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "generate",
      "Greedy decoding with an LLM decoder exported with its key/value cache (token ids in and out, timed)");
  cmd->add_option("model", a->model, "The ONNX decoder (inputs input_ids, attention_mask, past_key_values.N.key/value)")
      ->required();
  cmd->add_option("--prompt", a->prompt, "The prompt's token ids, comma-separated")->required();
  cmd->add_option("--tokens", a->tokens, "How many tokens to generate")->check(CLI::PositiveNumber);
  cmd->add_option("--eos", a->eos, "Stop after this token id");
  cmd->add_option("--cache", a->cache,
                  "static: caches of a fixed length (a multiple of 64 positions, the mask as long), one graph for "
                  "every step, where the model keeps its present as long as its past (GroupQueryAttention); growing: "
                  "a position longer each token; auto: static where the model allows it")
      ->check(CLI::IsMember({"auto", "static", "growing"}));
  cmd->add_option("--warmup", a->warmup, "Untimed generations first (compiling each shape)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--threads", a->threads, "Intra-op threads (0: KILN_NUM_THREADS or all cores)");
  // (A prompt's graph runs once a generation: measuring fewer threads on its
  // first runs, as the thread governor does, would slow it every time.)
  cmd->add_flag("--adapt-threads", a->adapt_threads,
                "Measure how many threads pay off for each graph as it runs (on a busy machine); by default every "
                "step runs on all of them");
  cmd->add_option("--optimization-level", a->level, "0 eager, 1 compiled, 2 compiled and optimized");
  cmd->add_option("--profile", a->profile,
                  "Profile the timed generation; write profile.txt, trace.json and report.html here")
      ->check(writable_folder());
  cmd->callback([a] {
    SessionOptions so;
    so.threads = a->threads;
    so.adapt_threads = a->adapt_threads;
    so.optimization_level = a->level;
    InferenceSession session(a->model, so);
    const DecoderIo io = decoder_io(session);
    const std::vector<int64_t> prompt = parse_tokens(a->prompt);
    // auto: static unless the model's first step shows it cannot keep one.
    bool static_cache = a->cache != "growing";
    auto run = [&] {
      std::optional<Generation> g = generate(session, io, prompt, a->tokens, a->eos, static_cache);
      if (!g && a->cache == "static")
        KILN_FAIL(
            "generate: --cache static, but the model's present caches are not as long as its past ones (it "
            "grows them by concatenation); use --cache growing or auto");
      if (!g) {
        static_cache = false;
        g = generate(session, io, prompt, a->tokens, a->eos, false);
      }
      return *g;
    };
    for (int i = 0; i < a->warmup; ++i) run();
    if (!a->profile.empty()) profiler::start();
    const Generation g = run();
    if (!a->profile.empty()) {
      profiler::stop();
      profiler::write_folder(a->profile, "kiln generate, " + std::to_string(g.tokens.size()) + " tokens");
    }
    std::printf("%s: %zu layers' caches (%s), prompt of %zu tokens\ntokens:", a->model.c_str(), io.caches.size() / 2,
                static_cache ? "static, 64 positions at a time" : "growing", prompt.size());
    for (int64_t t : g.tokens) std::printf(" %lld", static_cast<long long>(t));
    const double step = median(g.step_ms);
    std::printf("\nprefill %.3f ms, decode p50 %.3f ms/token (%.1f tokens/s), %d graphs compiled\n", g.prefill_ms, step,
                step > 0 ? 1000.0 / step : 0.0, session.compiles());
  });
}

}  // namespace kiln::cli

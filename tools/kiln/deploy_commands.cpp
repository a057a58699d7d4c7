// `kiln export`, `kiln run` and `kiln bench`: from a trained checkpoint to an
// ONNX file, and running one.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <sstream>

#include "bench_shapes.h"
#include "cli_args.h"
#include "cli_checks.h"
#include "kiln/allocator.h"
#include "kiln/io.h"
#include "kiln/kiln.h"
#include "kiln/onnx.h"
#include "kiln/profiler.h"
#include "kiln/recipe.h"
#include "kiln/runtime.h"

namespace kiln::cli {

std::vector<int64_t> parse_ints(const std::string& text, const char* what) {
  std::vector<int64_t> v;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      v.push_back(std::stoll(item, &used));
      KILN_CHECK(used == item.size(), "");
    } catch (const std::exception&) {
      KILN_FAIL(what, ": '", text, "' should be comma-separated integers, like 1,1,28,28");
    }
    KILN_CHECK(v.back() > 0, what, ": sizes must be positive, got ", v.back());
  }
  KILN_CHECK(!v.empty(), what, " is empty");
  return v;
}

Tensor load_input(const std::string& path) {
  auto ext = std::filesystem::path(path).extension().string();
  if (ext == ".npy") return io::load_npy(path);
  if (ext == ".pb") return load_tensor_pb(path);
  KILN_FAIL("'", path, "': use a .npy file (numpy.save) or an ONNX TensorProto .pb file");
}

namespace {

void save_output(const std::string& path, const Tensor& t) {
  auto ext = std::filesystem::path(path).extension().string();
  if (ext == ".pb") return save_tensor_pb(path, t);
  KILN_CHECK(ext == ".npy", "--output '", path, "': use a .npy or .pb file name");
  io::save_npy(path, t);
}

// The batch every input fixes (axis 0 of a known size, the same for all), or
// -1 where some input's batch is free or unknown.
int64_t fixed_batch(const InferenceSession& session) {
  int64_t fixed = -1;
  for (const auto& info : session.inputs()) {
    if (!info.shape_known || info.shape.empty() || info.shape[0] < 0 || (fixed >= 0 && info.shape[0] != fixed))
      return -1;
    fixed = info.shape[0];
  }
  return fixed;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

void add_export(CLI::App& app) {
  struct Args {
    std::string recipe, checkpoint, shape = "1,1,28,28", out = "model.onnx", input_name, output_name;
    bool dynamic_batch = false;
    int opset = 17;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("export", "Export a trained model to ONNX (inference mode, batch norm folded)");
  cmd->add_option("--recipe", a->recipe, "The recipe the model was trained with")->required();
  cmd->add_option("--checkpoint", a->checkpoint, "Its checkpoint (.safetensors)")->required();
  cmd->add_option("--input-shape", a->shape, "Input shape, e.g. 1,1,28,28 (token models: batch,sequence)");
  cmd->add_option("--out", a->out, "The ONNX file to write");
  cmd->add_flag("--dynamic-batch", a->dynamic_batch, "Make axis 0 of inputs and outputs the symbolic 'batch'");
  cmd->add_option("--opset", a->opset, "ONNX opset, 13 to 17");
  cmd->add_option("--input-name", a->input_name, "Name of the graph input (default: input)");
  cmd->add_option("--output-name", a->output_name, "Name of the graph output (default: output)");
  cmd->callback([a] {
    recipe::Recipe r = recipe::parse_recipe_file(a->recipe);
    auto net = recipe::build_model(r);
    io::load_cell(*net, a->checkpoint);
    Shape shape = parse_ints(a->shape, "--input-shape");
    bool tokens = r.dataset == "text" || r.dataset == "kjv";
    Tensor sample = tokens ? zeros(shape, DType::Int64) : zeros(shape);
    ExportOptions o;
    o.dynamic_batch = a->dynamic_batch;
    o.opset = a->opset;
    if (!a->input_name.empty()) o.input_names = {a->input_name};
    if (!a->output_name.empty()) o.output_names = {a->output_name};
    o.graph_name = r.model;
    o.metadata = {{"kiln.recipe", r.text}, {"kiln.model", r.model}, {"kiln.checkpoint", a->checkpoint}};
    if (!r.normalize_mean.empty()) {
      std::string m, s;
      for (double v : r.normalize_mean) m += (m.empty() ? "" : ",") + std::to_string(v);
      for (double v : r.normalize_std) s += (s.empty() ? "" : ",") + std::to_string(v);
      o.metadata["kiln.normalize_mean"] = m;
      o.metadata["kiln.normalize_std"] = s;
    }
    net->set_train(false);  // a model loaded from a checkpoint to deploy: nothing to say about its mode
    ExportReport report = export_model(net, {sample}, a->out, o);
    std::printf("wrote %s: %s\n", a->out.c_str(), report.str().c_str());
  });
}

// A half-precision session's outputs against float32's on the same inputs:
// per floating output, the largest difference (and the largest float32
// value beside it) and, for [rows, classes] outputs, the rows whose argmax
// stays.
void print_precision_report(const std::string& precision, const std::vector<TensorInfo>& infos,
                            const std::vector<Tensor>& half, const std::vector<Tensor>& full) {
  for (size_t i = 0; i < half.size() && i < full.size(); ++i) {
    const Tensor h = half[i].to(cpu_device()), f = full[i].to(cpu_device());
    if (!is_floating(f.dtype()) || f.numel() == 0) continue;
    const double diff = amax(abs(h.to(DType::Float64) - f.to(DType::Float64))).item<double>();
    const double scale = amax(abs(f.to(DType::Float64))).item<double>();
    std::printf("%s against float32, output '%s': max abs difference %.3g (largest |value| %.3g)", precision.c_str(),
                infos[i].name.c_str(), diff, scale);
    if (f.dim() == 2) {
      const auto a = argmax(h, 1).to_vector<int64_t>(), b = argmax(f, 1).to_vector<int64_t>();
      size_t same = 0;
      for (size_t r = 0; r < a.size(); ++r) same += a[r] == b[r];
      std::printf("; argmax the same in %zu of %zu rows", same, a.size());
    }
    std::printf("\n");
  }
}

void add_run(CLI::App& app) {
  struct Args {
    std::string model, output;
    std::vector<std::string> inputs;
    std::string device = "cpu";
    std::string precision = "float32";
    int level = 2;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("run", "Run an ONNX or MindIR model on inputs from .npy or .pb files");
  cmd->add_option("model", a->model, "The ONNX or MindIR (.mindir) file")->required();
  cmd->add_option("--input", a->inputs, "One file per model input, in order (.npy or TensorProto .pb)")->required();
  cmd->add_option("--output", a->output, "Write the first output here (.npy or .pb)");
  cmd->add_option("--optimization-level", a->level, "0 eager, 1 compiled, 2 compiled and optimized");
  cmd->add_option("--device", a->device, "Where the model runs: cpu, or another backend of this build (reference)");
  cmd->add_option("--precision", a->precision,
                  "float32, or half precision: bfloat16 (bf16) or float16 (fp16), compared with float32 on the inputs")
      ->check(precisions());
  cmd->callback([a] {
    SessionOptions so;
    so.optimization_level = a->level;
    so.device = a->device;
    so.precision = a->precision;
    InferenceSession session(a->model, so);
    if (!session.rewrites().empty()) std::printf("%s\n", session.rewrites().c_str());
    std::vector<Tensor> inputs;
    for (const auto& p : a->inputs) inputs.push_back(load_input(p));
    auto t0 = std::chrono::steady_clock::now();
    auto outputs = session.run(inputs);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (a->precision != "float32" && a->precision != "fp32") {
      so.precision = "float32";
      print_precision_report(a->precision, session.outputs(), outputs, InferenceSession(a->model, so).run(inputs));
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      const Tensor y = outputs[i].to(cpu_device());  // the summary is computed on the host
      std::printf("%s: %s %s\n", session.outputs()[i].name.c_str(), dtype_name(y.dtype()), shape_str(y.shape()).c_str());
      if (y.dim() == 2 && is_floating(y.dtype())) {
        auto top = argmax(y, 1).to_vector<int64_t>();
        std::printf("  argmax per row:");
        for (size_t r = 0; r < top.size() && r < 32; ++r) std::printf(" %lld", static_cast<long long>(top[r]));
        std::printf("%s\n", top.size() > 32 ? " ..." : "");
      }
    }
    std::printf("ran in %.2f ms (first run: includes compiling the graph)\n", ms);
    if (!a->output.empty()) {
      save_output(a->output, outputs[0].to(cpu_device()));  // from the device the model ran on
      std::printf("wrote %s\n", a->output.c_str());
    }
  });
}

// The profile of one case's timed runs, in dir/<folder>/: batch<N> for a
// batch size, the --shape text (in0=1x20..59) for shapes, inputs for files.
void write_profile(const std::string& dir, const std::string& folder, const std::string& title) {
  profiler::stop();
  profiler::write_folder(dir + "/" + folder, "kiln bench, " + title);
}

// Times runs over the input sets in turn (a range of lengths as a server
// sees them) and prints one line: p50/p90/p99, samples/s and peak memory;
// with set_labels, then one line per set from the same runs. width: the
// label's column (negative: left-aligned).
void time_runs(InferenceSession& session, const std::vector<std::vector<Tensor>>& sets, int runs,
               const std::string& label, int width, bool profile, const std::vector<std::string>& set_labels = {}) {
  // Warm-up: compiling each shape, first touches, and the thread governor's first measurements.
  for (const auto& inputs : sets) session.run(inputs);
  for (int i = 0; i < 10; ++i) session.run(sets[static_cast<size_t>(i) % sets.size()]);
  cpu_allocator_reset_peak();
  if (profile) profiler::start();
  std::vector<double> ms;
  std::vector<std::vector<double>> ms_of_set(sets.size());
  double rows = 0, total_ms = 0;
  const size_t total = static_cast<size_t>(runs) * sets.size();  // --runs per shape
  for (size_t i = 0; i < total; ++i) {
    const auto& inputs = sets[i % sets.size()];
    auto t0 = std::chrono::steady_clock::now();
    session.run(inputs);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    total_ms += ms.back();
    ms_of_set[i % sets.size()].push_back(ms.back());
    rows += inputs.empty() || inputs[0].dim() == 0 ? 1.0 : static_cast<double>(inputs[0].shape()[0]);
  }
  const double peak_mb = static_cast<double>(cpu_allocator_stats().peak_bytes_in_use) / 1e6;
  std::printf("%*s %10.3f %10.3f %10.3f %14.0f %12.2f\n", width, label.c_str(), percentile(ms, 0.5),
              percentile(ms, 0.9), percentile(ms, 0.99), rows * 1000.0 / total_ms, peak_mb);
  for (size_t s = 0; s < set_labels.size() && s < sets.size(); ++s) {
    const auto& t = ms_of_set[s];
    double sum = 0;
    for (double v : t) sum += v;
    const double batch = sets[s].empty() || sets[s][0].dim() == 0 ? 1.0 : static_cast<double>(sets[s][0].shape()[0]);
    std::printf("  %*s %10.3f %10.3f %10.3f %14.0f\n", width < 0 ? width + 2 : width, set_labels[s].c_str(),
                percentile(t, 0.5), percentile(t, 0.9), percentile(t, 0.99), batch * 1000.0 * t.size() / sum);
  }
}

// --bucket NAME:AXIS=S1,S2,...
SessionOptions::Bucket parse_bucket(const std::string& spec) {
  const size_t colon = spec.rfind(':', spec.find('=')), equals = spec.find('=');
  KILN_CHECK(colon != std::string::npos && equals != std::string::npos && colon > 0 && equals > colon + 1,
             "--bucket '", spec, "': write NAME:AXIS=S1,S2,..., such as in0:1=32,64,128");
  SessionOptions::Bucket b;
  b.input = spec.substr(0, colon);
  const std::string axis = spec.substr(colon + 1, equals - colon - 1);
  KILN_CHECK(axis.find_first_not_of("0123456789") == std::string::npos && axis.size() < 4, "--bucket '", spec,
             "': the axis after ':' must be a number, as in in0:1=32,64");
  b.axis = std::stoi(axis);
  b.sizes = parse_ints(spec.substr(equals + 1), "--bucket");
  return b;
}

void add_bench(CLI::App& app) {
  struct Args {
    std::string model, batches = "1,64", profile;
    std::vector<std::string> shapes, input_files, buckets;
    std::string device = "cpu";
    std::string precision = "float32";
    int runs = 50, threads = 0, level = 2;
    bool fixed_threads = false, each = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("bench", "Latency and throughput of an ONNX or MindIR model");
  cmd->add_option("model", a->model, "The ONNX or MindIR (.mindir) file")->required();
  auto* batch_option = cmd->add_option("--batch", a->batches, "Batch sizes, e.g. 1,64 (axis 0 of every input)");
  cmd->add_option("--shape", a->shapes,
                  "An input's shape, NAME=DIMS such as in0=1x37; one axis may be a range, in0=1x20..59, whose "
                  "lengths are timed in turn (repeat for several inputs)")
      ->excludes(batch_option);
  cmd->add_flag("--each", a->each, "With a range in --shape, also one line per shape, from the same runs in turn");
  cmd->add_option("--input", a->input_files, "Time these inputs: one .npy or .pb file per model input, in order")
      ->excludes(batch_option);
  cmd->add_option("--bucket", a->buckets,
                  "Pad an input's axis up to one of these sizes, NAME:AXIS=S1,S2,... such as in0:1=32,64 (one graph "
                  "per bucket; for axes whose padding cannot change the results, repeat for several)");
  cmd->add_option("--runs", a->runs, "Timed runs per batch size or shape (after 10 warm-up runs)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--threads", a->threads, "Intra-op threads (0: KILN_NUM_THREADS or all cores)");
  cmd->add_flag("--fixed-threads", a->fixed_threads,
               "Run every time on all the threads (by default each batch size measures how many pay off)");
  cmd->add_option("--optimization-level", a->level, "0 eager, 1 compiled, 2 compiled and optimized");
  cmd->add_option("--profile", a->profile, "Profile the timed runs; write profile.txt, trace.json and report.html here")
      ->check(writable_folder());
  cmd->add_option("--device", a->device, "Where the model runs: cpu, or another backend of this build (reference)");
  cmd->add_option("--precision", a->precision,
                  "float32, or half precision: bfloat16 (bf16) or float16 (fp16), its outputs first compared with "
                  "float32's on the first inputs timed")
      ->check(precisions());
  cmd->callback([a, batch_option] {
    SessionOptions so;
    so.device = a->device;
    so.threads = a->threads;
    so.adapt_threads = !a->fixed_threads;
    so.optimization_level = a->level;
    so.precision = a->precision;
    for (const std::string& spec : a->buckets) so.buckets.push_back(parse_bucket(spec));
    InferenceSession session(a->model, so);
    const std::string format = session.opset() > 0 ? "opset " + std::to_string(session.opset()) : "MindIR";
    std::printf("%s: %s, %s\n", a->model.c_str(), format.c_str(), session.producer().c_str());
    if (!session.rewrites().empty()) std::printf("%s\n", session.rewrites().c_str());
    KILN_CHECK(a->shapes.empty() || a->input_files.empty(), "bench: give --shape or --input, not both");
    KILN_CHECK(!a->each || !a->shapes.empty(), "bench: --each needs a range in --shape, such as ",
               session.inputs().empty() ? std::string("in0") : session.inputs()[0].name, "=1x20..59");
    // Each case's inputs are made just before it is timed: a batch's inputs
    // do not count in another's peak memory.
    struct Case {
      std::string label;
      std::string folder;  // the profile's
      std::function<std::vector<std::vector<Tensor>>()> make;
      std::vector<std::string> set_labels;  // --each: a line per set
    };
    std::vector<Case> cases;
    if (!a->input_files.empty()) {
      KILN_CHECK(a->input_files.size() == session.inputs().size(), "bench: the model has ", session.inputs().size(),
                 " inputs; give one --input file for each, in order");
      cases.push_back({"the --input files", "inputs", [a] {
                         std::vector<Tensor> inputs;
                         for (const auto& p : a->input_files) inputs.push_back(load_input(p));
                         return std::vector<std::vector<Tensor>>{inputs};
                       },
                       {}});
    } else if (!a->shapes.empty()) {
      BenchShapes shapes = parse_bench_shapes(a->shapes, session.inputs());
      KILN_CHECK(!a->each || !shapes.set_labels.empty(), "bench: --each needs a range in --shape, such as ",
                 session.inputs()[0].name, "=1x20..59");
      // (A folder name: the shapes' text, the inputs separated by commas and
      // any slash in an input's name made an underscore.)
      std::string folder = shapes.label;
      std::replace(folder.begin(), folder.end(), ' ', ',');
      std::replace(folder.begin(), folder.end(), '/', '_');
      cases.push_back({shapes.label, folder, [&session, shapes] {
                         std::vector<std::vector<Tensor>> sets;
                         for (const auto& set : shapes.sets) {
                           sets.emplace_back();
                           for (const auto& info : session.inputs()) {
                             const Shape& s = set.at(info.name);
                             sets.back().push_back(is_floating(info.dtype) ? rand(s, info.dtype) : zeros(s, info.dtype));
                           }
                         }
                         return sets;
                       },
                       a->each ? shapes.set_labels : std::vector<std::string>{}});
    } else {
      std::vector<int64_t> batches = parse_ints(a->batches, "--batch");
      // Not asked for batches: a model exported with a fixed batch (as
      // torchvision's are, at 1) is timed at that one.
      if (const int64_t fixed = fixed_batch(session);
          batch_option->count() == 0 && fixed >= 0 && batches != std::vector<int64_t>{fixed}) {
        std::printf(
            "batch fixed at %lld by the model: timing that batch (one exported with a dynamic batch axis "
            "is timed at --batch %s)\n",
            static_cast<long long>(fixed), a->batches.c_str());
        batches = {fixed};
      }
      for (int64_t batch : batches) {
        std::vector<Shape> shapes;
        for (const auto& info : session.inputs()) {
          Shape s(info.shape.begin(), info.shape.end());
          KILN_CHECK(info.shape_known && !s.empty(), "bench: input '", info.name, "' has no known shape");
          KILN_CHECK(s[0] < 0 || s[0] == batch, "bench: input '", info.name, "' has a fixed batch of ", s[0],
                     session.opset() > 0
                         ? "; export with a dynamic batch axis (kiln export --dynamic-batch) to bench batch "
                         : "; bench it at --batch " + std::to_string(s[0]) +
                               ", or export it from MindSpore with a dynamic batch (set_inputs with None) for batch ",
                     batch);
          s[0] = batch;
          for (size_t d = 1; d < s.size(); ++d)
            KILN_CHECK(s[d] >= 0, "bench: input '", info.name, "' axis ", d, " has no fixed size; give it with --shape ",
                       info.name, "=DIMS, such as --shape ", info.name, "=1x37 (or a range of lengths, 1x20..59)");
          shapes.push_back(s);
        }
        cases.push_back({std::to_string(batch), "batch" + std::to_string(batch), [&session, shapes] {
                           std::vector<Tensor> inputs;
                           for (size_t i = 0; i < shapes.size(); ++i) {
                             const DType d = session.inputs()[i].dtype;
                             inputs.push_back(is_floating(d) ? rand(shapes[i], d) : zeros(shapes[i], d));
                           }
                           return std::vector<std::vector<Tensor>>{inputs};
                         },
                         {}});
      }
    }
    if (a->precision != "float32" && a->precision != "fp32" && !cases.empty()) {
      const std::vector<Tensor> inputs = cases.front().make().front();
      SessionOptions full = so;
      full.precision = "float32";
      print_precision_report(a->precision, session.outputs(), session.run(inputs),
                             InferenceSession(a->model, full).run(inputs));
    }
    const bool by_batch = a->shapes.empty() && a->input_files.empty();
    const int width = by_batch ? 6 : -22;
    std::printf("%*s %10s %10s %10s %14s %12s\n", width, by_batch ? "batch" : "shape", "p50 ms", "p90 ms", "p99 ms",
                "samples/s", "peak MB");
    for (const auto& c : cases) {
      time_runs(session, c.make(), a->runs, c.label, width, !a->profile.empty(), c.set_labels);
      if (!a->profile.empty()) write_profile(a->profile, c.folder, by_batch ? "batch " + c.label : c.label);
    }
    struct rusage u {};
    getrusage(RUSAGE_SELF, &u);
    std::printf("peak RSS %.0f MB\n", static_cast<double>(u.ru_maxrss) / 1024.0);
  });
}

}  // namespace

void add_deploy_commands(CLI::App& app) {
  add_export(app);
  add_run(app);
  add_bench(app);
}

}  // namespace kiln::cli

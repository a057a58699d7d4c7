// `kiln quantize`: an ONNX model (or a recipe's checkpoint) quantized after
// training, calibrated on sample inputs, written in the QDQ form; or its
// MatMuls' weights alone in 2 to 8 bits (--weight-bits: MatMulNBits).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli_args.h"
#include "kiln/io.h"
#include "kiln/quantize.h"
#include "kiln/recipe.h"
#include "kiln/runtime.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

bool tensor_file(const fs::path& p) { return p.extension() == ".npy" || p.extension() == ".pb"; }

std::vector<fs::path> sorted_entries(const fs::path& dir) {
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(dir)) entries.push_back(e.path());
  std::sort(entries.begin(), entries.end());
  return entries;
}

// A calibration file's tensor, checked against the model input it feeds.
Tensor load_for(const fs::path& p, const TensorInfo& input) {
  Tensor t = load_input(p.string());
  KILN_CHECK(input.accepts(t), "--data: '", p.string(), "' holds ", dtype_name(t.dtype()), " ", shape_str(t.shape()),
             ", but the model's input is ", input.str());
  return t;
}

// Calibration batches from a folder: for a model of one input, each .npy or
// .pb file is a batch of it; for several, each subfolder holds one file per
// input, in the inputs' order by file name.

std::vector<std::vector<Tensor>> load_batches(const std::string& dir, const std::vector<TensorInfo>& model_inputs) {
  const size_t inputs = model_inputs.size();
  KILN_CHECK(fs::is_directory(dir), "--data '", dir, "' is not a folder of .npy or .pb files");
  std::vector<std::vector<Tensor>> batches;
  for (const fs::path& p : sorted_entries(dir)) {
    if (inputs == 1 && tensor_file(p)) batches.push_back({load_for(p, model_inputs[0])});
    if (inputs > 1 && fs::is_directory(p)) {
      std::vector<fs::path> files;
      for (const fs::path& f : sorted_entries(p))
        if (tensor_file(f)) files.push_back(f);
      KILN_CHECK(files.size() == inputs, "--data: '", p.string(), "' holds ", files.size(),
                 " tensor files but the model has ", inputs, " inputs (one file per input, in order by name)");
      std::vector<Tensor> batch;
      for (size_t i = 0; i < inputs; ++i) batch.push_back(load_for(files[i], model_inputs[i]));
      batches.push_back(std::move(batch));
    }
  }
  KILN_CHECK(!batches.empty(), "--data '", dir, "' holds no calibration batches: ",
             inputs == 1 ? "put .npy or .pb files of the model's input there"
                         : "put one subfolder per batch there, each with one .npy or .pb file per input");
  return batches;
}

}  // namespace

void add_quantize_command(CLI::App& app) {
  struct Args {
    std::string model, data, recipe, checkpoint, out, activations = "uint8";
    int64_t calibration_batches = 8;
    QuantizeOptions options;
    int64_t weight_bits = 0;  // weight-only when given
    WeightQuantizeOptions weights;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "quantize",
      "Quantize a model after training: int8 QDQ ONNX (Kiln's int8 kernels and ONNX Runtime's), or its "
      "MatMuls' weights alone (--weight-bits)");
  cmd->add_option("model", a->model, "The float ONNX model (or use --recipe and --checkpoint)");
  cmd->add_option("--data", a->data, "Calibration batches: a folder of .npy/.pb files of the model's input");
  cmd->add_option("--recipe", a->recipe, "Quantize this recipe's checkpoint, calibrated on its training data");
  cmd->add_option("--checkpoint", a->checkpoint, "The checkpoint to quantize (with --recipe)");
  cmd->add_option("--calibration-batches", a->calibration_batches, "Batches of the recipe's data to calibrate on");
  cmd->add_option("--out", a->out, "The quantized model to write (default: MODEL.int8.onnx, or model.int8.onnx)");
  cmd->add_option("--method", a->options.method, "Activation ranges: minmax, percentile or entropy")
      ->check(CLI::IsMember({"minmax", "percentile", "entropy"}));
  cmd->add_option("--percentile", a->options.percentile, "With --method percentile: the share of values kept, 99.99");
  cmd->add_option("--activations", a->activations, "uint8 or int8")->check(CLI::IsMember({"uint8", "int8"}));
  cmd->add_flag("--reduce-range", a->options.reduce_range,
                "7-bit weights, which CPUs without VNNI compute exactly on int8 kernels");
  cmd->add_option("--keep", a->options.keep_float, "Leave this layer (node or output name) in float32; repeatable");
  cmd->add_option("--keep-sensitive", a->options.keep_sensitive,
                  "Also leave in float32 the N layers whose outputs quantization changes most");
  cmd->add_option("--held-out", a->options.held_out, "Share of calibration batches kept back for the report");
  cmd->add_option("--weight-bits", a->weight_bits,
                  "Weight-only: each MatMul's constant weights in 2, 4 or 8 bits (com.microsoft's MatMulNBits, as "
                  "LLMs run on CPUs); no calibration data");
  cmd->add_option("--block-size", a->weights.block_size, "With --weight-bits: weights per scale along K, 32");
  cmd->add_flag("--symmetric", a->weights.symmetric, "With --weight-bits: no zero points (scale max |w|)");
  cmd->add_flag("--embeddings", a->weights.embeddings,
                "With --weight-bits: also each Gather of a constant table's rows (token embeddings), as "
                "com.microsoft's GatherBlockQuantized");
  cmd->add_option("--accuracy-level", a->weights.accuracy_level,
                  "With --weight-bits: 4 rounds the activations to int8 per block at run time (faster), 0 keeps "
                  "float32 products")
      ->check(CLI::IsMember({0, 4}));
  cmd->callback([a] {
    if (a->weight_bits) {
      KILN_CHECK(!a->model.empty() && a->data.empty() && a->recipe.empty(),
                 "--weight-bits quantizes a model file's weights only: give the model, and no --data or --recipe");
      std::ifstream f(a->model, std::ios::binary);
      KILN_CHECK(f.good(), "cannot read '", a->model, "'");
      a->weights.bits = a->weight_bits;
      a->weights.keep_float = a->options.keep_float;
      const QuantizeResult result = quantize_weights(
          std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()), a->weights);
      if (a->out.empty())
        a->out = fs::path(a->model).replace_extension(".int" + std::to_string(a->weight_bits) + ".onnx").string();
      std::printf("%s", result.report.str().c_str());
      result.save(a->out);
      std::printf("wrote %s\n", a->out.c_str());
      return;
    }
    a->options.activations = a->activations == "int8" ? DType::Int8 : DType::UInt8;
    KILN_CHECK(a->options.held_out >= 0 && a->options.held_out < 1,
               "--held-out is the share of the calibration batches kept back for the report, at least 0 and below 1; "
               "got ",
               a->options.held_out);
    QuantizeResult result;
    if (!a->recipe.empty()) {
      KILN_CHECK(!a->checkpoint.empty() && a->model.empty() && a->data.empty(),
                 "--recipe takes --checkpoint, and no model file or --data (its data calibrates)");
      const recipe::QuantizedRecipe q = recipe::quantize(recipe::parse_recipe_file(a->recipe), a->checkpoint, a->options,
                                                         a->calibration_batches);
      result = q.quantized;
      if (a->out.empty()) a->out = "model.int8.onnx";
      std::printf("%s", result.report.str().c_str());
      if (q.float_accuracy >= 0)
        std::printf("test accuracy on %lld samples: float32 %.2f%%, int8 %.2f%% (%+.2f points)\n",
                    static_cast<long long>(q.test_samples), 100 * q.float_accuracy, 100 * q.quantized_accuracy,
                    100 * (q.quantized_accuracy - q.float_accuracy));
    } else {
      KILN_CHECK(!a->model.empty() && !a->data.empty(),
                 "give a model and --data (a folder of calibration inputs), or --recipe with --checkpoint");
      std::ifstream f(a->model, std::ios::binary);
      KILN_CHECK(f.good(), "cannot read '", a->model, "'");
      const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      const std::vector<TensorInfo> inputs = InferenceSession::from_bytes(bytes, {}, a->model).inputs();
      result = quantize_model(bytes, load_batches(a->data, inputs), a->options);
      if (a->out.empty()) a->out = fs::path(a->model).replace_extension(".int8.onnx").string();
      std::printf("%s", result.report.str().c_str());
    }
    result.save(a->out);
    std::printf("wrote %s\n", a->out.c_str());
  });
}

}  // namespace kiln::cli

// A trained recipe's checkpoint quantized: exported to ONNX, calibrated on
// the recipe's own data and scored on its test set, float beside int8.
#include <map>

#include "kiln/functional.h"
#include "kiln/io.h"
#include "kiln/nn/quantize_aware.h"
#include "kiln/onnx.h"
#include "kiln/recipe.h"
#include "kiln/runtime.h"
#include "train/recipe_data.h"

namespace kiln::recipe {
namespace {

// The share of test samples whose argmax is their label.
double accuracy(InferenceSession& session, data::BatchSource& test, int64_t& samples) {
  int64_t right = 0;
  samples = 0;
  test.start_epoch();
  data::Batch b;
  while (test.next(b)) {
    const Tensor logits = session.run({b.inputs.contiguous()}).at(0);
    const auto guess = argmax(logits, 1).to_vector<int64_t>();
    const auto labels = cast(b.labels, DType::Int64).contiguous().to_vector<int64_t>();
    for (size_t i = 0; i < guess.size(); ++i) right += guess[i] == labels[i];
    samples += static_cast<int64_t>(guess.size());
  }
  return samples ? static_cast<double>(right) / static_cast<double>(samples) : 0.0;
}

}  // namespace

QuantizedRecipe quantize(const Recipe& r, const std::string& checkpoint, const QuantizeOptions& options,
                         int64_t calibration_batches) {
  KILN_CHECK(calibration_batches > 0, "quantize: calibration_batches must be positive, got ", calibration_batches);
  detail::RecipeData d = detail::load_data(r);
  auto net = detail::make_model(r, d.config);
  io::load_checkpoint(*net, checkpoint);
  net->set_train(false);
  if (r.quantize_aware) nn::set_fake_quantization(*net, false);  // exported as the float model its training adapted
  data::BatchSource& source = d.validation ? *d.validation : *d.train;
  std::vector<std::vector<Tensor>> calibration;
  source.start_epoch();
  data::Batch b;
  while (static_cast<int64_t>(calibration.size()) < calibration_batches && source.next(b))
    calibration.push_back({b.inputs.contiguous()});
  KILN_CHECK(!calibration.empty(), "quantize: the recipe's data gave no batches");
  // A quantization-aware training's layers keep the input ranges they learned.
  QuantizeOptions o = options;
  if (r.quantize_aware) {
    std::map<std::string, Tensor> buffers;
    for (auto& [name, t] : net->buffers_and_names()) buffers[name] = t;
    const std::string suffix = ".input_quantizer.observed";
    for (const auto& [name, seen] : buffers) {
      if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0 ||
          seen.item<double>() == 0)
        continue;
      const std::string layer = name.substr(0, name.size() - suffix.size());
      o.input_ranges[layer + ".weight"] = {buffers.at(layer + ".input_quantizer.running_min").item<double>(),
                                           buffers.at(layer + ".input_quantizer.running_max").item<double>()};
    }
  }
  ExportOptions eo;
  eo.dynamic_batch = true;
  eo.graph_name = r.model;
  const Tensor sample = calibration[0][0].slice(0, 0, 1);
  const std::string float_model = export_model_bytes(net, {sample}, eo);
  QuantizedRecipe out;
  out.quantized = quantize_model(float_model, calibration, o);
  if (d.seq_len == 0) {
    InferenceSession f = InferenceSession::from_bytes(float_model, {}, "the float model");
    InferenceSession q = InferenceSession::from_bytes(out.quantized.model, {}, "the quantized model");
    out.float_accuracy = accuracy(f, *d.test, out.test_samples);
    out.quantized_accuracy = accuracy(q, *d.test, out.test_samples);
  }
  return out;
}

}  // namespace kiln::recipe

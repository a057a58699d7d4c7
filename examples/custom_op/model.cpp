// A small gated MLP built on the package's ops: trained eagerly and as a
// compiled training step, exported to ONNX (the custom ops as nodes of the
// com.kiln.custom domain) and run again by Kiln's inference runtime.
//
//   custom_op_model PACKAGE.so OUT_DIR
//
// Exits non-zero when a check fails; OUT_DIR/gated_mlp.onnx is what
// `kiln serve --plugin PACKAGE.so --model OUT_DIR/gated_mlp.onnx` serves.
#include <kiln/kiln.h>
#include <kiln/onnx.h>
#include <kiln/op_library.h>
#include <kiln/runtime.h>
#include <kiln/train_step.h>

#include <cmath>
#include <cstdio>
#include <memory>

using namespace kiln;

class GatedMlp : public nn::Cell {
 public:
  GatedMlp() {
    norm_ = register_parameter("norm", ones({16}));
    gate_ = register_cell("gate", std::make_shared<nn::Dense>(16, 32));
    up_ = register_cell("up", std::make_shared<nn::Dense>(16, 32));
    out_ = register_cell("out", std::make_shared<nn::Dense>(32, 4));
  }
  Tensor construct(const Tensor& x) override {
    Tensor h = call("rms_norm", {x, norm_}, {{"eps", 1e-5}}).at(0);
    return (*out_)(call("swiglu", {(*gate_)(h), (*up_)(h)}).at(0));
  }

 private:
  Tensor norm_;
  std::shared_ptr<nn::Dense> gate_, up_, out_;
};

// Four classes, separable by a fixed random projection of the features.
std::pair<Tensor, Tensor> batch(Generator& gen, const Tensor& teacher) {
  Tensor x = randn({32, 16}, DType::Float32, &gen);
  return {x, argmax(matmul(x, teacher), 1)};
}

Tensor loss_of(const Tensor& logits, const Tensor& labels) { return cross_entropy(logits, labels); }

// Trains `steps` steps from seed 7, eagerly or compiled; returns the losses.
std::vector<double> train_steps(std::shared_ptr<GatedMlp> net, bool graph, int steps) {
  Generator data(3);
  Tensor teacher = randn({16, 4}, DType::Float32, &data);
  auto opt = std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{0.1, 0.9});
  jit::TrainStep step(net, loss_of, opt);
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) {
    auto [x, y] = batch(data, teacher);
    if (graph) {
      losses.push_back(step(x, y).loss.item<double>());
    } else {
      Tensor loss = loss_of((*net)(x), y);
      losses.push_back(loss.item<double>());
      opt->zero_grad();
      loss.backward();
      opt->step();
    }
  }
  return losses;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s PACKAGE.so OUT_DIR\n", argv[0]);
    return 2;
  }
  try {
    const OpLibrary& lib = load_op_library(argv[1]);
    std::printf("loaded package %s: %zu ops\n", lib.name.c_str(), lib.ops.size());

    manual_seed(7);
    auto eager = std::make_shared<GatedMlp>();
    manual_seed(7);
    auto graph = std::make_shared<GatedMlp>();
    std::vector<double> a = train_steps(eager, false, 60), b = train_steps(graph, true, 60);
    std::printf("eager loss %.4f -> %.4f, graph loss %.4f -> %.4f\n", a.front(), a.back(), b.front(), b.back());
    if (!(a.back() < 0.5 * a.front())) throw std::runtime_error("eager training did not halve the loss");
    for (size_t i = 0; i < 5; ++i)
      if (std::abs(a[i] - b[i]) > 1e-4 * (1 + std::abs(a[i])))
        throw std::runtime_error("graph mode's loss differs from eager's at step " + std::to_string(i));

    eager->set_train(false);
    Tensor x = randn({5, 16});
    const std::string path = std::string(argv[2]) + "/gated_mlp.onnx";
    ExportOptions options;
    options.dynamic_batch = true;
    ExportReport report = export_model(eager, {x}, path, options);
    std::printf("exported %s: %s\n", path.c_str(), report.str().c_str());
    InferenceSession session(path);
    Tensor want = (*eager)(x), got = session.run({x}).at(0);
    double diff = amax(abs(sub(want, got))).item<double>();
    std::printf("runtime against eager: max difference %.2g\n", diff);
    if (diff > 1e-4) throw std::runtime_error("the exported model's outputs differ from eager's");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_op_model: %s\n", e.what());
    return 1;
  }
  std::printf("ok\n");
  return 0;
}

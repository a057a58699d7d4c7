// Is the data pipeline ever the bottleneck? For the workloads of
// ../shared/BENCHMARKS.md this prints the samples/s of the loader alone next
// to the samples/s the training loop consumes, and the training rate when the
// batches come through an augmenting pipeline (whose workers share the cores
// with training) against in-memory batches.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "kiln/kiln.h"

using namespace kiln;
namespace vision = data::vision;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Samples/s of reading `batches` batches (the first epoch's start included).
double loader_rate(data::BatchSource& source, int64_t batches) {
  auto start = Clock::now();
  source.start_epoch();
  data::Batch b;
  int64_t samples = 0;
  for (int64_t i = 0; i < batches && source.next(b); ++i) samples += b.inputs.shape()[0];
  return static_cast<double>(samples) / seconds_since(start);
}

// Samples/s of training `steps` steps on batches from `source`, after 3 warm-up steps.
double training_rate(const std::string& model_name, const models::ModelConfig& config, data::BatchSource& source,
                     int64_t steps, bool classes_last = false) {
  manual_seed(0);
  auto net = models::make_model(model_name, config);
  auto opt = std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
  CrossEntropyOptions o;
  o.classes_last = classes_last;
  net->set_train(true);
  source.start_epoch();
  data::Batch b;
  int64_t samples = 0;
  Clock::time_point start;
  for (int64_t i = 0; i < steps + 3 && source.next(b); ++i) {
    if (i == 3) start = Clock::now();
    Tensor loss = cross_entropy(net->construct(b.inputs), b.labels, o);
    opt->zero_grad();
    loss.backward();
    opt->step();
    if (i >= 3) samples += b.inputs.shape()[0];
  }
  return static_cast<double>(samples) / seconds_since(start);
}

void row(const char* what, double loader, double training) {
  std::printf("%-52s loader %9.0f samples/s   training %7.0f samples/s   loader/training %6.1fx\n", what, loader,
              training, loader / training);
}

std::vector<data::Transform> augment() {
  return {vision::random_crop(28, 28, 2, 0, vision::Layout::CHW),
          vision::random_horizontal_flip(0.5, vision::Layout::CHW)};
}

}  // namespace

int main() {
  std::printf("threads: %d\n", get_num_threads());
  auto train = std::make_shared<data::TensorDataset>(data::load_fashion_mnist("train"));
  models::ModelConfig image;

  data::BatchIterator in_memory(*train, 64, true, false, 1);
  data::Pipeline augmented(train);
  augmented.map(augment()).shuffle(1).batch(64).num_parallel_workers(2).prefetch(4);

  // PNG files decoded on the fly: 2048 Fashion-MNIST images written to a folder.
  auto folder = std::filesystem::temp_directory_path() / "kiln_bench_loader_png";
  std::filesystem::remove_all(folder);
  for (int64_t i = 0; i < 2048; ++i) {
    auto dir = folder / std::to_string(train->labels.data<int64_t>()[i]);
    std::filesystem::create_directories(dir);
    Tensor img = cast(mul(train->inputs.select(0, i), full({1, 28, 28}, 255.0)), DType::UInt8).permute({1, 2, 0});
    auto png = data::encode_png(img.contiguous());
    std::ofstream(dir / (std::to_string(i) + ".png"), std::ios::binary)
        .write(reinterpret_cast<const char*>(png.data()), static_cast<std::streamsize>(png.size()));
  }
  data::Pipeline png(std::make_shared<data::ImageFolderDataset>(folder.string(), data::ImageFolderOptions{.channels = 1}));
  png.map({vision::random_crop(28, 28, 2), vision::random_horizontal_flip(), vision::rescale(1.0 / 255),
           vision::hwc_to_chw()})
      .shuffle(1).batch(64).num_parallel_workers(2).prefetch(4);

  for (const char* name : {"mlp", "cnn", "resnet8"}) {
    int64_t steps = std::string(name) == "mlp" ? 300 : std::string(name) == "cnn" ? 60 : 30;
    double base = training_rate(name, image, in_memory, steps);
    double fed = training_rate(name, image, augmented, steps);
    std::printf("\n%s (batch 64): training fed by the augmenting pipeline runs at %.2fx the in-memory rate\n", name,
                fed / base);
    row("  in-memory tensors (BatchIterator)", loader_rate(in_memory, 300), base);
    row("  pipeline: crop+flip, 2 workers", loader_rate(augmented, 300), base);
    row("  PNG files: decode+crop+flip, 2 workers", loader_rate(png, 32), base);
  }
  std::filesystem::remove_all(folder);

  auto splits = data::make_text_splits(data::read_kjv_bible(), 128);
  data::Pipeline text(splits.train);
  text.shuffle(1).batch(32).num_parallel_workers(2);
  models::ModelConfig lm;
  lm.vocab_size = splits.vocab.size();
  double lm_rate = training_rate("char_transformer", lm, text, 10, true);
  std::printf("\nchar_transformer (batch 32 x 128 tokens)\n");
  row("  text windows, 2 workers", loader_rate(text, 300), lm_rate);
  return 0;
}

#include "train/recipe_data.h"

#include "kiln/nn/quantize_aware.h"

#include <filesystem>
#include <functional>

namespace kiln::recipe::detail {
namespace {
namespace vision = data::vision;
using vision::Layout;

constexpr int64_t kEvalBatch = 256;  // small enough that activations do not set the memory peak

std::string mnist_dir(const Recipe& r) {
  if (!r.dataset_path.empty()) return r.dataset_path;
  KILN_CHECK(r.dataset == "fashion_mnist", r.source, ": dataset '", r.dataset,
             "' has no default location; set dataset.path to the folder of its idx files");
  return data::kFashionMnistDir;
}

// The recipe's transforms for training (random ones included) or for
// evaluation (resize and crops only, a random crop becoming a centre crop),
// then the conversion to float32 [C, H, W].
std::vector<data::Transform> transforms_for(const Recipe& r, Layout layout, bool bytes, bool training) {
  std::vector<data::Transform> out;
  for (const auto& t : r.transforms) {
    int64_t h = t.size.empty() ? 0 : t.size[0], w = t.size.empty() ? 0 : t.size[1];
    if (t.name == "resize") out.push_back(vision::resize(h, w, layout));
    if (t.name == "center_crop" || (t.name == "random_crop" && !training)) out.push_back(vision::center_crop(h, w, layout));
    if (!training) continue;
    if (t.name == "random_crop") out.push_back(vision::random_crop(h, w, t.padding, 0, layout));
    if (t.name == "random_horizontal_flip") out.push_back(vision::random_horizontal_flip(t.probability, layout));
    if (t.name == "random_rotation") out.push_back(vision::random_rotation(t.degrees, 0, layout));
  }
  if (bytes) out.push_back(vision::rescale(1.0 / 255));
  if (!r.normalize_mean.empty()) out.push_back(vision::normalize(r.normalize_mean, r.normalize_std, layout));
  if (layout == Layout::HWC) out.push_back(vision::hwc_to_chw());
  if (training)
    for (const auto& t : r.transforms)
      if (t.name == "random_erasing") out.push_back(vision::random_erasing(t.probability));
  return out;
}

// Training pipelines shuffle and honour drop_remainder; evaluation sees every sample.
std::unique_ptr<data::Pipeline> pipeline(std::shared_ptr<const data::Dataset> ds, std::vector<data::Transform> t,
                                         const Recipe& r, int64_t batch, bool shuffle, const Shard& shard) {
  auto p = std::make_unique<data::Pipeline>(std::move(ds));
  if (shuffle) batch /= shard.ranks;  // the recipe's batch is the global one
  p->map(std::move(t)).batch(batch, shuffle && r.drop_remainder).num_parallel_workers(r.workers).prefetch(std::max(2, 2 * r.workers));
  if (shuffle) p->shuffle(r.seed + 1);
  if (shard.ranks > 1)
    p->sampler(std::make_shared<data::DistributedSampler>(shard.ranks, shard.rank, shuffle, r.seed + 1, /*pad=*/shuffle));
  return p;
}

// The model's input channels and image size from the test set's first
// sample, which must be a square image [C, H, W].
void set_image_config(const Recipe& r, const std::function<data::Sample()>& first, const char* what,
                      models::ModelConfig& config) {
  Shape input;
  try {
    input = first().input.shape();
  } catch (const std::exception& e) {
    KILN_FAIL(r.source, ": ", what, " fails: ", e.what());
  }
  KILN_CHECK(input.size() == 3 && input[1] == input[2], r.source, ": the model zoo needs square images [C, H, W], got ",
             shape_str(input), "; add a resize or crop transform with one size");
  config.in_channels = input[0];
  config.image_size = input[1];
}

// Shards stream: the training set shard by shard (this rank's share), the
// test set read whole by every rank, each keeping its share of samples.
RecipeData shard_data(const Recipe& r, const Shard& shard) {
  data::ShardSourceOptions train;
  train.batch_size = r.batch_size / shard.ranks;
  train.shuffle = true;
  train.drop_remainder = r.drop_remainder;
  train.seed = r.seed + 1;
  train.rank = shard.rank;
  train.ranks = shard.ranks;
  train.channels = r.channels;
  train.transforms = transforms_for(r, Layout::HWC, true, true);
  data::ShardSourceOptions test = train;
  test.batch_size = kEvalBatch;
  test.shuffle = false;
  test.drop_remainder = false;
  test.transforms = transforms_for(r, Layout::HWC, true, false);
  RecipeData d;
  auto test_source = std::make_unique<data::ShardSource>(data::index_shards(r.test_shards), test);
  set_image_config(r, [&] { return test_source->first_sample(); }, "the test shards' first sample", d.config);
  d.train = std::make_unique<data::ShardSource>(data::index_shards(r.shards), train);
  d.test = std::move(test_source);
  return d;
}

RecipeData image_data(const Recipe& r, const Shard& shard) {
  if (r.dataset == "shards") return shard_data(r, shard);
  std::shared_ptr<const data::Dataset> train, test;
  Layout layout = Layout::HWC;
  bool bytes = true;
  RecipeData d;
  if (r.dataset == "mnist" || r.dataset == "fashion_mnist") {
    std::string dir = mnist_dir(r);
    auto tr = std::make_shared<data::TensorDataset>(data::load_mnist(dir, "train"));
    auto te = std::make_shared<data::TensorDataset>(data::load_mnist(dir, "test"));
    if (r.transforms.empty() && r.normalize_mean.empty() && r.validation_fraction == 0) {
      // In memory and untransformed: gather rows, no per-sample work.
      auto train_batches =
          std::make_unique<data::BatchIterator>(*tr, r.batch_size / shard.ranks, true, r.drop_remainder, r.seed + 1);
      auto test_batches = std::make_unique<data::BatchIterator>(*te, kEvalBatch, false);
      if (shard.ranks > 1) {
        train_batches->shard(shard.ranks, shard.rank);
        test_batches->shard(shard.ranks, shard.rank, /*pad=*/false);
      }
      d.train = std::move(train_batches);
      d.test = std::move(test_batches);
      d.config.in_channels = 1;
      d.config.image_size = tr->inputs.shape()[2];
      return d;
    }
    train = tr;
    test = te;
    layout = Layout::CHW;
    bytes = false;
  } else if (r.dataset == "cifar10") {
    KILN_CHECK(!r.dataset_path.empty(), r.source, ": dataset cifar10 needs dataset.path: the folder of its binary ",
               "files (data_batch_1.bin ... test_batch.bin)");
    train = std::make_shared<data::TensorDataset>(data::load_cifar10(r.dataset_path, "train"));
    test = std::make_shared<data::TensorDataset>(data::load_cifar10(r.dataset_path, "test"));
  } else {
    data::ImageFolderOptions files;
    files.skip_unreadable = r.skip_bad_images;
    auto tr = std::make_shared<data::ImageFolderDataset>(r.dataset_path + "/train", files);
    auto te = std::make_shared<data::ImageFolderDataset>(r.dataset_path + "/test", files);
    KILN_CHECK(tr->class_names() == te->class_names(), r.source, ": ", r.dataset_path,
               "/train and /test must hold the same class folders");
    d.config.num_classes = static_cast<int64_t>(tr->class_names().size());
    train = tr;
    test = te;
  }
  std::shared_ptr<const data::Dataset> validation;
  if (r.validation_fraction > 0) std::tie(train, validation) = data::random_split(train, r.validation_fraction, r.seed);
  auto eval_transforms = transforms_for(r, layout, bytes, false);
  d.train = pipeline(train, transforms_for(r, layout, bytes, true), r, r.batch_size, true, shard);
  auto test_pipeline = pipeline(test, eval_transforms, r, kEvalBatch, false, shard);
  set_image_config(r, [&] { return test_pipeline->sample(0); }, "the test set's first image", d.config);
  d.test = std::move(test_pipeline);
  if (validation) d.validation = pipeline(validation, eval_transforms, r, kEvalBatch, false, shard);
  return d;
}

RecipeData text_data(const Recipe& r, const Shard& shard) {
  std::string text = r.dataset == "kjv" ? data::read_kjv_bible() : data::read_text_file(r.dataset_path);
  int64_t seq_len = r.model_config.seq_len;
  auto splits = data::make_text_splits(text, seq_len, r.validation_fraction > 0 ? r.validation_fraction : 0.1);
  RecipeData d;
  d.config = r.model_config;
  d.config.vocab_size = splits.vocab.size();
  d.seq_len = seq_len;
  d.train = pipeline(splits.train, {}, r, r.batch_size, true, shard);
  d.test = pipeline(splits.validation, {}, r, r.batch_size, false, shard);
  bool watches_validation = false;
  for (const auto& c : r.callbacks) watches_validation = watches_validation || c.monitor.rfind("val_", 0) == 0;
  if (watches_validation) d.validation = pipeline(splits.validation, {}, r, r.batch_size, false, shard);
  return d;
}

}  // namespace

RecipeData load_data(const Recipe& r, const Shard& shard) {
  KILN_CHECK(r.batch_size % shard.ranks == 0, r.source, ": batch_size ", r.batch_size, " is the global batch, split over ",
             shard.ranks, " ranks; make it a multiple of ", shard.ranks);
  RecipeData d = r.dataset == "text" || r.dataset == "kjv" ? text_data(r, shard) : image_data(r, shard);
  if (r.dataset != "text" && r.dataset != "kjv") {
    models::ModelConfig c = r.model_config;
    c.in_channels = d.config.in_channels;
    c.image_size = d.config.image_size;
    if (r.dataset == "image_folder") c.num_classes = d.config.num_classes;
    d.config = c;
  }
  return d;
}

std::shared_ptr<nn::Cell> make_model(const Recipe& r, const models::ModelConfig& config) {
  auto net = models::make_model(r.model, config);
  if (r.quantize_aware) nn::quantize_aware(*net);
  return net;
}

}  // namespace kiln::recipe::detail

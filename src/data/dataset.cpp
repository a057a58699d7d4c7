#include <cmath>
#include <cstring>

#include "kiln/data/dataset.h"
#include "kiln/data/sampler.h"

namespace kiln::data {

TensorDataset::TensorDataset(Tensor inputs_, Tensor labels_, std::vector<Tensor> extras_)
    : inputs(std::move(inputs_)), labels(std::move(labels_)), extras(std::move(extras_)) {
  KILN_CHECK(inputs.defined() && labels.defined() && inputs.dim() >= 1 && labels.dim() >= 1 &&
                 labels.shape()[0] == inputs.shape()[0],
             "a TensorDataset needs inputs and labels with the same number of samples on axis 0, got ",
             inputs.defined() ? inputs.meta_str() : "none", " and ", labels.defined() ? labels.meta_str() : "none");
  for (size_t k = 0; k < extras.size(); ++k)
    KILN_CHECK(extras[k].defined() && extras[k].dim() >= 1 && extras[k].shape()[0] == inputs.shape()[0],
               "a TensorDataset's column ", k + 2, " needs a row per sample (", inputs.shape()[0], "), got ",
               extras[k].defined() ? extras[k].meta_str() : "none");
}

Sample TensorDataset::get(int64_t index) const {
  KILN_CHECK(index >= 0 && index < size(), "TensorDataset: index ", index, " is out of range for ", size(), " samples");
  Sample s{inputs.select(0, index), labels.select(0, index)};
  for (const Tensor& column : extras) s.extra.push_back(column.select(0, index));
  return s;
}

Subset::Subset(std::shared_ptr<const Dataset> source, std::vector<int64_t> indices)
    : source_(std::move(source)), indices_(std::move(indices)) {
  KILN_CHECK(source_ != nullptr, "Subset needs a dataset");
  for (int64_t i : indices_)
    KILN_CHECK(i >= 0 && i < source_->size(), "Subset: index ", i, " is out of range for ", source_->size(), " samples");
}

Sample Subset::get(int64_t index) const {
  KILN_CHECK(index >= 0 && index < size(), "Subset: index ", index, " is out of range for ", size(), " samples");
  return source_->get(indices_[static_cast<size_t>(index)]);
}

std::pair<std::shared_ptr<Subset>, std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> source,
                                                                         double held_out_fraction, uint64_t seed) {
  KILN_CHECK(source != nullptr && held_out_fraction > 0 && held_out_fraction < 1,
             "random_split: the held-out fraction must be in (0, 1), got ", held_out_fraction);
  std::vector<int64_t> order = RandomSampler(seed).indices(source->size(), 0);
  auto held = static_cast<size_t>(std::llround(held_out_fraction * static_cast<double>(order.size())));
  KILN_CHECK(held > 0 && held < order.size(), "random_split: ", order.size(), " samples are too few to hold out ",
             held_out_fraction);
  size_t keep = order.size() - held;
  return {std::make_shared<Subset>(source, std::vector<int64_t>(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep))),
          std::make_shared<Subset>(source, std::vector<int64_t>(order.begin() + static_cast<std::ptrdiff_t>(keep), order.end()))};
}

namespace {
template <typename Column>
Tensor stack_column(const std::vector<Sample>& samples, Column column, const std::string& what) {
  const Tensor& first = column(samples[0]);
  KILN_CHECK(first.defined(), "collate: sample 0 has no ", what);
  Shape shape = first.shape();
  shape.insert(shape.begin(), static_cast<int64_t>(samples.size()));
  Tensor out = Tensor::empty(shape, first.dtype());
  size_t bytes = static_cast<size_t>(first.numel()) * first.element_size();
  char* dst = static_cast<char*>(out.raw_data());
  for (size_t i = 0; i < samples.size(); ++i) {
    const Tensor& t = column(samples[i]);
    KILN_CHECK(t.defined() && t.shape() == first.shape() && t.dtype() == first.dtype(), "collate: the ", what,
               " of sample ", i, " in the batch is ", t.defined() ? t.meta_str() : "missing", " but sample 0's is ",
               first.meta_str(), "; samples in a batch must match (resize or crop images to one size first)");
    Tensor c = t.is_contiguous() ? t : t.contiguous();
    std::memcpy(dst + i * bytes, c.raw_data(), bytes);
  }
  return out;
}
}  // namespace

Batch collate(const std::vector<Sample>& samples) {
  KILN_CHECK(!samples.empty(), "collate: no samples");
  Batch batch{stack_column(samples, [](const Sample& s) -> const Tensor& { return s.input; }, "input"),
              stack_column(samples, [](const Sample& s) -> const Tensor& { return s.label; }, "label")};
  const size_t columns = samples[0].extra.size();
  for (size_t i = 1; i < samples.size(); ++i)
    KILN_CHECK(samples[i].extra.size() == columns, "collate: sample ", i, " in the batch has ",
               samples[i].extra.size() + 2, " columns but sample 0 has ", columns + 2,
               "; every sample of a dataset must have the same columns");
  for (size_t k = 0; k < columns; ++k)
    batch.extras.push_back(stack_column(
        samples, [k](const Sample& s) -> const Tensor& { return s.extra[k]; }, "column " + std::to_string(k + 2)));
  return batch;
}

}  // namespace kiln::data

#include <cstring>

#include "kiln/data/dataset.h"

namespace kiln::data {

TensorDataset::TensorDataset(Tensor inputs_, Tensor labels_) : inputs(std::move(inputs_)), labels(std::move(labels_)) {
  KILN_CHECK(inputs.defined() && labels.defined() && inputs.dim() >= 1 && labels.dim() >= 1 &&
                 labels.shape()[0] == inputs.shape()[0],
             "a TensorDataset needs inputs and labels with the same number of samples on axis 0, got ",
             inputs.defined() ? inputs.meta_str() : "none", " and ", labels.defined() ? labels.meta_str() : "none");
}

Sample TensorDataset::get(int64_t index) const {
  KILN_CHECK(index >= 0 && index < size(), "TensorDataset: index ", index, " is out of range for ", size(), " samples");
  return {inputs.select(0, index), labels.select(0, index)};
}

namespace {
Tensor stack_column(const std::vector<Sample>& samples, Tensor Sample::*column, const char* what) {
  const Tensor& first = samples[0].*column;
  KILN_CHECK(first.defined(), "collate: sample 0 has no ", what);
  Shape shape = first.shape();
  shape.insert(shape.begin(), static_cast<int64_t>(samples.size()));
  Tensor out = Tensor::empty(shape, first.dtype());
  size_t bytes = static_cast<size_t>(first.numel()) * first.element_size();
  char* dst = static_cast<char*>(out.raw_data());
  for (size_t i = 0; i < samples.size(); ++i) {
    const Tensor& t = samples[i].*column;
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
  return {stack_column(samples, &Sample::input, "input"), stack_column(samples, &Sample::label, "label")};
}

}  // namespace kiln::data

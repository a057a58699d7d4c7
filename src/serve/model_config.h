#pragma once
// A served model's config.yaml (next to its version folders):
//
//   max_batch_size: 64            # 0: requests are run as they come, unbatched
//   inputs:  [{name: input, datatype: FP32, shape: [1, 28, 28]}]   # per sample; checked against the model
//   outputs: [{name: output, datatype: FP32, shape: [10]}]
//   dynamic_batching: {max_queue_delay_microseconds: 500, preferred_batch_size: [32, 64], max_queue_size: 256}
//   instance_count: 1             # batches computed at once
//   warmup: [1, 64]               # batch sizes run once before the model is ready
//   allow_non_finite: false       # true: inf and NaN inputs are run (node by node), not refused
//   device: cuda:0                # where it runs (default: kiln serve --device, else cpu)
//   memory_budget_mb: 2048        # what it may hold on its device after warm-up; more fails the load
#include <string>
#include <vector>

#include "kiln/dtype.h"

namespace kiln::serve {

struct TensorSpec {
  std::string name, datatype;
  std::vector<int64_t> shape;  // without the batch axis when max_batch_size > 0
};

struct ModelConfig {
  std::string name;
  int64_t max_batch_size = 0;
  std::vector<TensorSpec> inputs, outputs;
  bool dynamic_batching = false;
  int64_t max_queue_delay_us = 0;
  std::vector<int64_t> preferred_batch_sizes;
  int64_t max_queue_size = 1024;  // requests waiting; more are refused with 503
  int instance_count = 1;
  std::vector<int64_t> warmup_batch_sizes = {1};
  bool allow_non_finite = false;
  // Every row computed alone (the batch-1 graph), so a sample gets the same
  // bits whatever it is batched with; batches are then still queued together
  // but run row by row, at batch 1's throughput. Off: a batch runs as one, and
  // a row's results may differ from its batch-1 ones in the last bits.
  bool batch_invariant = false;
  // Without max_batch_size: a model whose inputs and outputs all have a
  // dynamic batch axis still runs at power-of-two batch sizes up to this
  // (padded), so a server compiles and keeps a few graphs, not one per batch
  // size it is sent (kiln serve --model). 0: every batch as given.
  int64_t batch_buckets_up_to = 0;
  // The device the model's session runs on ("cuda", "cuda:1"); empty: the
  // server's (ServeOptions::device). Requests are staged to it and answered
  // from host copies of its outputs.
  std::string device;
  // > 0: the memory the model may hold on its device once loaded and warmed
  // up (weights, compiled graphs' arenas), in MiB, so that models sharing a
  // GPU each keep to their share; a model over it does not load.
  double memory_budget_mb = 0;
};

// Throws naming the file and the key; unknown keys are refused.
ModelConfig parse_model_config(const std::string& yaml_text, const std::string& source);

// OIP v2 datatype names ("FP32", "INT64", ...).
const char* oip_datatype(DType d);
// Throws listing the supported names.
DType dtype_of_oip(const std::string& datatype);

}  // namespace kiln::serve

#pragma once
// The CUDA backend's kernels for a training step's reductions, loss and update.
#include "kiln/backend_library.h"

namespace kiln::cuda {

// sum, mean, softmax and log_softmax (floating dtypes), layer_norm,
// batch_norm, dropout, embedding, cross_entropy, sgd_update, adam_update,
// max_pool2d, adaptive_avg_pool2d, and their backward ops.
void register_training_kernels(BackendRegistration& reg);

}  // namespace kiln::cuda

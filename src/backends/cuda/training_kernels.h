#pragma once
// The CUDA backend's kernels for a training step's reductions, loss and update.
#include "kiln/backend_library.h"

namespace kiln::cuda {

// softmax and log_softmax (floating dtypes), layer_norm,
// batch_norm, dropout, embedding, cross_entropy, sgd_update, adam_update,
// max_pool2d, adaptive_avg_pool2d, and their backward ops.
void register_training_kernels(BackendRegistration& reg);
// sum (floating and integer dtypes), mean, amax, amin, prod, logsumexp, var,
// std, argmax, argmin, cumsum, cumprod and cumprod_backward.
void register_reduce_kernels(BackendRegistration& reg);

}  // namespace kiln::cuda

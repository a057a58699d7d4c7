#pragma once
// The CUDA backend's kernels for a training step's layers, reductions,
// losses, pooling, optimizer updates and gradient all-reduces.
#include "kiln/backend_library.h"

namespace kiln::cuda {

// softmax and log_softmax (floating dtypes), layer_norm, group_norm,
// batch_norm, dropout, embedding, and their backward ops.
void register_training_kernels(BackendRegistration& reg);
// sum (floating and integer dtypes), mean, amax, amin, prod, logsumexp, var,
// std, argmax, argmin, cumsum, cumprod and cumprod_backward.
void register_reduce_kernels(BackendRegistration& reg);
// cross_entropy and its backward, nll_loss, mse_loss, l1_loss,
// smooth_l1_loss, binary_cross_entropy_with_logits.
void register_loss_kernels(BackendRegistration& reg);
// sgd_update, adam_update, rmsprop_update.
void register_optimizer_kernels(BackendRegistration& reg);
// max_pool2d, avg_pool2d, adaptive_avg_pool2d and their backward ops.
void register_pool_kernels(BackendRegistration& reg);
// all_reduce, all_reduce_start and all_reduce_wait: the process group's
// (NCCL's, for CUDA tensors) in a step, as on the CPU.
void register_collective_kernels(BackendRegistration& reg);

}  // namespace kiln::cuda

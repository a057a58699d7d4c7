#pragma once
// The CUDA backend's kernels for the ops that take every dtype: casts,
// comparisons, where, the triangles; the joins: concat, pad, assign and the
// backward ops of pad and slice; the indexing ops; and interpolate.
#include "kiln/backend_library.h"

namespace kiln::cuda {

// cast, eq, ne, lt, le, gt, ge, where, tril, triu and all_finite.
void register_convert_kernels(BackendRegistration& reg);
// concat, assign, pad, pad_backward and slice_backward.
void register_join_kernels(BackendRegistration& reg);
// gather, index_select, scatter_add, scatter_reduce and one_hot (int64
// indices), and topk.
void register_index_kernels(BackendRegistration& reg);
// add, sub, mul, div, maximum, minimum, mod, neg, abs, sign, relu and clamp
// on integers; mod on floating types too.
void register_arithmetic_kernels(BackendRegistration& reg);
// interpolate and interpolate_backward (float32 and float64).
void register_resize_kernels(BackendRegistration& reg);

}  // namespace kiln::cuda

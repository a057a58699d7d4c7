// matmul (batched, broadcasting), linear and attention on cuBLASLt, in float32,
// float64, float16 and bfloat16 (the 16-bit ones accumulate in float32),
// linear's bias in the GEMM's epilogue. Kiln's tensors are row-major and
// cuBLASLt's matrices column-major, so C = A B runs as C^T = B^T A^T: a
// row-major [r, c] matrix is its column-major transpose as it lies, and a
// transposed view (a weight's .t()) is an operand with the transpose flag,
// not a copy. Operands whose layout no flag and stride describe (a batch
// that is neither dense nor broadcast) are gathered into workspace memory
// first. The algorithm is chosen by cuBLASLt's heuristic once per shape,
// layout and alignment, and cached.
#include "backends/cuda/matmul_kernels.h"

#include <cublasLt.h>

#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "backends/cuda/elementwise_launch.h"
#include "backends/cuda/on_device.h"
#include "backends/cuda/scratch.h"
#include "backends/cuda/training_launch.h"
#include "kiln/backend.h"
#include "ops/elementwise_formulas.h"

namespace kiln::cuda {
namespace {

void check_lt(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    KILN_FAIL("cuBLASLt: ", what, " failed: ", cublasLtGetStatusName(status), " (", cublasLtGetStatusString(status),
              ")");
}

cublasLtHandle_t lt_handle() {
  static std::once_flag once;
  static cublasLtHandle_t handle = nullptr;
  std::call_once(once, [] { check_lt(cublasLtCreate(&handle), "cublasLtCreate"); });
  return handle;
}

// A matrix operand as cuBLASLt reads it: `rows` x `cols` column-major with
// leading dimension `ld`, transposed when `op` says so, `batch_stride`
// elements apart (0: one matrix for the whole batch).
struct Operand {
  const void* data = nullptr;
  int64_t rows = 0, cols = 0, ld = 0, batch_stride = 0;
  cublasOperation_t op = CUBLAS_OP_N;
};

// Row-major [r, c] with strides (sr, sc) as op(L) = [c, r] column-major:
// dense rows are L itself (ld sr), dense columns are L transposed (ld sc).
bool as_operand(const void* data, int64_t r, int64_t c, int64_t sr, int64_t sc, Operand* o) {
  o->data = data;
  if (sc == 1 && (r == 1 || sr >= c)) {
    *o = {data, c, r, std::max<int64_t>(sr, c), 0, CUBLAS_OP_N};
    return true;
  }
  if (sr == 1 && (c == 1 || sc >= r)) {
    *o = {data, r, c, std::max<int64_t>(sc, r), 0, CUBLAS_OP_T};
    return true;
  }
  return false;
}

// The single stride that walks an operand's batch axes as the output's
// batch axes `batch` (which it broadcasts to), if there is one: 0 when one
// matrix serves the whole batch.
bool batch_stride_of(const Shape& shape, const std::vector<int64_t>& strides, const Shape& batch, int64_t* stride) {
  const size_t rank = shape.size() - 2, skip = batch.size() - rank;
  int64_t expect = -1;  // the stride the next outer axis needs to continue the run
  *stride = 0;
  for (size_t d = batch.size(); d-- > 0;) {
    if (batch[d] == 1) continue;
    const bool there = d >= skip && shape[d - skip] != 1;
    const int64_t s = there ? strides[d - skip] : 0;
    if (expect >= 0 && s != expect) return false;
    if (expect < 0) *stride = s;
    expect = s * batch[d];
  }
  return true;
}

int64_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int64_t align = 256;
  while (align > 1 && a % static_cast<uintptr_t>(align) != 0) align /= 2;
  return align;
}

struct Types {
  cudaDataType_t data, scale;
  cublasComputeType_t compute;
};
Types types_of(DType d) {
  switch (d) {
    case DType::Float32:
      return {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F};
    case DType::Float64:
      return {CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F};
    case DType::Float16:
      return {CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F};
    case DType::BFloat16:
      return {CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F};
    default:
      KILN_FAIL("cuBLASLt matmul takes floating dtypes, not ", dtype_name(d));
  }
}

// Owns cuBLASLt's descriptors for one call.
struct Descriptors {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  ~Descriptors() {
    for (auto* l : {a, b, d})
      if (l) cublasLtMatrixLayoutDestroy(l);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

cublasLtMatrixLayout_t layout(cudaDataType_t type, const Operand& o, int64_t batch) {
  cublasLtMatrixLayout_t l = nullptr;
  check_lt(cublasLtMatrixLayoutCreate(&l, type, static_cast<uint64_t>(o.rows), static_cast<uint64_t>(o.cols), o.ld),
           "cublasLtMatrixLayoutCreate");
  const int32_t count = static_cast<int32_t>(batch);
  check_lt(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
           "batch count");
  check_lt(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &o.batch_stride,
                                            sizeof o.batch_stride),
           "batch stride");
  return l;
}

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // what cuBLASLt asks for on Hopper

// The heuristic's first algorithm per problem, cached: the key is every
// value the choice depends on.
using ProblemKey = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                              int64_t, int64_t, int64_t, int64_t, int, int64_t>;
cublasLtMatmulAlgo_t algorithm(const ProblemKey& key, const Descriptors& ds, const std::array<int64_t, 4>& alignments) {
  static std::mutex mu;
  static std::map<ProblemKey, cublasLtMatmulAlgo_t> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const uint64_t workspace = kWorkspaceBytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace);
  const cublasLtMatmulPreferenceAttributes_t align_attrs[] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (size_t i = 0; i < 4; ++i) {
    const uint32_t a = static_cast<uint32_t>(alignments[i]);
    cublasLtMatmulPreferenceSetAttribute(pref, align_attrs[i], &a, sizeof a);
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(lt_handle(), ds.desc, ds.a, ds.b, ds.d, ds.d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  check_lt(status, "cublasLtMatmulAlgoGetHeuristic");
  KILN_CHECK(found > 0, "cuBLASLt has no algorithm for this matmul (", std::get<2>(key), "x", std::get<3>(key), "x",
             std::get<4>(key), ", batch ", std::get<5>(key), ")");
  return cache.emplace(key, result.algo).first->second;
}

// y[batch..., m, n] = alpha a[batch..., m, k] b[batch..., k, n] (+ bias[n]),
// with a and b broadcasting over the batch axes and y dense.
void gemm(const View& a, const View& b, void* y, const Shape& y_shape, DType dtype, const void* bias,
          double alpha = 1.0) {
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  const Shape batch(y_shape.begin(), y_shape.end() - 2);
  int64_t batches = 1;
  for (int64_t s : batch) batches *= s;
  const int64_t m = y_shape[y_shape.size() - 2], n = y_shape.back(), k = a.shape.back();
  const size_t element = dtype_size(dtype);
  if (m == 0 || n == 0 || batches == 0) return;
  if (k == 0) {  // sums of nothing
    KILN_CHECK(bias == nullptr, "CUDA linear over zero input features with a bias: give the layer features");
    check(cudaMemsetAsync(y, 0, static_cast<size_t>(batches * m * n) * element,
                          static_cast<cudaStream_t>(context.stream.handle)),
          "cudaMemsetAsync");
    return;
  }

  // Each operand as cuBLASLt reads it, or a dense copy where no transpose
  // flag and batch stride describe its layout.
  std::vector<std::unique_ptr<Scratch>> keep;
  auto operand = [&](const View& v, int64_t rows, int64_t cols) {
    const size_t r = v.shape.size();
    Operand o;
    int64_t stride = 0;
    if (batch_stride_of(v.shape, v.strides, batch, &stride) &&
        as_operand(v.data, rows, cols, v.strides[r - 2], v.strides[r - 1], &o)) {
      o.batch_stride = stride;
      return o;
    }
    Shape full = batch;
    full.push_back(rows);
    full.push_back(cols);
    const View dense = gathered(v, full, element, context, keep);
    as_operand(dense.data, rows, cols, cols, 1, &o);
    o.batch_stride = batches > 1 ? rows * cols : 0;
    return o;
  };
  // C^T = B^T A^T: cuBLASLt's A is our b, its B our a.
  const Operand lb = operand(b, k, n), la = operand(a, m, k);
  const Operand ld{y, n, m, n, batches > 1 ? m * n : 0, CUBLAS_OP_N};
  const Types types = types_of(dtype);

  Descriptors ds;
  check_lt(cublasLtMatmulDescCreate(&ds.desc, types.compute, types.scale), "cublasLtMatmulDescCreate");
  check_lt(cublasLtMatmulDescSetAttribute(ds.desc, CUBLASLT_MATMUL_DESC_TRANSA, &lb.op, sizeof lb.op), "transa");
  check_lt(cublasLtMatmulDescSetAttribute(ds.desc, CUBLASLT_MATMUL_DESC_TRANSB, &la.op, sizeof la.op), "transb");
  if (bias) {  // a bias per row of cuBLASLt's D: per output feature
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    check_lt(cublasLtMatmulDescSetAttribute(ds.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue),
             "epilogue");
    check_lt(cublasLtMatmulDescSetAttribute(ds.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
             "bias pointer");
  }
  ds.a = layout(types.data, lb, batches);
  ds.b = layout(types.data, la, batches);
  ds.d = layout(types.data, ld, batches);
  const std::array<int64_t, 4> alignments{alignment_of(lb.data), alignment_of(la.data), alignment_of(ld.data),
                                          alignment_of(ld.data)};
  const ProblemKey key{static_cast<int>(dtype),
                       context.device.index,
                       m,
                       n,
                       k,
                       batches,
                       lb.ld,
                       la.ld,
                       lb.batch_stride,
                       la.batch_stride,
                       static_cast<int64_t>(lb.op) * 2 + la.op,
                       alignments[0],
                       alignments[1],
                       alignments[2],
                       bias ? alignment_of(bias) : 0,
                       bias != nullptr,
                       0};
  const cublasLtMatmulAlgo_t algo = algorithm(key, ds, alignments);
  Scratch workspace(context, kWorkspaceBytes);
  const double alpha64 = alpha, zero64 = 0.0;
  const float alpha32 = static_cast<float>(alpha), zero32 = 0.0f;
  const bool f64 = dtype == DType::Float64;
  check_lt(cublasLtMatmul(lt_handle(), ds.desc, f64 ? static_cast<const void*>(&alpha64) : &alpha32, lb.data, ds.a,
                          la.data, ds.b, f64 ? static_cast<const void*>(&zero64) : &zero32, y, ds.d, y, ds.d, &algo,
                          workspace.get(), kWorkspaceBytes, static_cast<cudaStream_t>(context.stream.handle)),
           "cublasLtMatmul");
}

void matmul_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  KILN_CHECK(out[0].is_contiguous(), "CUDA matmul writes dense outputs");
  gemm(view_of(in[0]), view_of(in[1]), out[0].device_data(), out[0].shape(), out[0].dtype(), nullptr);
}

// y = x W^T + bias over x's last axis: x as [rows, in] (gathered when its
// leading axes are not dense), W^T as W's transposed view, the bias in
// cuBLASLt's epilogue (float64's added after: its GEMMs take no epilogue).
void linear_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const Tensor &x = in[0], &w = in[1];
  Tensor& y = out[0];
  KILN_CHECK(y.is_contiguous(), "CUDA linear writes dense outputs");
  const KernelContext context = kernel_context();
  const int64_t features = w.shape()[0], inputs = w.shape()[1], rows = inputs > 0 ? x.numel() / inputs : 0;
  std::vector<std::unique_ptr<Scratch>> keep;
  View a = view_of(x);
  if (!x.is_contiguous()) a = gathered(a, x.shape(), x.element_size(), context, keep);
  a.shape = {rows, inputs};
  a.strides = {inputs, 1};
  const View wt{w.device_data(), {inputs, features}, {w.strides()[1], w.strides()[0]}};
  const bool has_bias = in.size() > 2 && in[2].defined();
  const Tensor* bias = has_bias ? &in[2] : nullptr;
  View dense_bias = bias ? view_of(*bias) : View{};
  if (bias && bias->strides()[0] != 1)
    dense_bias = gathered(dense_bias, bias->shape(), bias->element_size(), context, keep);
  const bool epilogue = bias && y.dtype() != DType::Float64;
  gemm(a, wt, y.device_data(), {rows, features}, y.dtype(), epilogue ? dense_bias.data : nullptr);
  if (bias && !epilogue) {  // y += bias, in place
    MapCall add;
    add.geometry = map_geometry({rows, features}, {{rows, features}, {rows, features}, {features}},
                                {{features, 1}, {features, 1}, {1}});
    add.dtype = MapDType::Float64;
    add.out = y.device_data();
    add.in[0] = y.device_data();
    add.in[1] = dense_bias.data;
    add.stream = context.stream.handle;
    OnDevice on(context.device.index);
    launch_map(formulas::Add(Attrs{}), add);
  }
}

// A view's last two axes swapped (a transpose, no copy).
View transposed(View v) {
  const size_t r = v.shape.size();
  std::swap(v.shape[r - 1], v.shape[r - 2]);
  std::swap(v.strides[r - 1], v.strides[r - 2]);
  return v;
}

// attention: y = softmax(q k^T scale + mask, causal) v over the leading
// (batch, head) axes, as two GEMMs around the softmax kernel, the weights
// [..., L, S] in out[1] when the gradient keeps them, else in scratch memory.
void attention_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor &q = in[0], &k = in[1], &v = in[2];
  Tensor& y = out[0];
  KILN_CHECK(y.is_contiguous(), "CUDA attention writes a dense output");
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  const int64_t r = q.dim(), l = q.shape()[r - 2], s = k.shape()[r - 2], d = q.shape()[r - 1];
  const double given = attrs.get_float("scale", 0.0);
  const double scale = given > 0 ? given : 1.0 / std::sqrt(static_cast<double>(d));
  Shape scores = q.shape();
  scores.back() = s;
  int64_t count = 1;
  for (int64_t n : scores) count *= n;
  std::vector<std::unique_ptr<Scratch>> keep;
  void* weights = nullptr;
  if (out[1].numel() == count) {
    weights = out[1].device_data();
  } else {
    keep.push_back(std::make_unique<Scratch>(context, static_cast<size_t>(count) * y.element_size()));
    weights = keep.back()->get();
  }
  gemm(view_of(q), transposed(view_of(k)), weights, scores, y.dtype(), nullptr, scale);
  std::vector<int64_t> dense(scores.size());
  for (int64_t i = static_cast<int64_t>(scores.size()), step = 1; i-- > 0;) {
    dense[static_cast<size_t>(i)] = step;
    step *= scores[static_cast<size_t>(i)];
  }
  if (in.size() > 3 && in[3].defined()) {  // the additive mask, broadcast, in place
    MapCall add;
    add.geometry = map_geometry(scores, {scores, scores, in[3].shape()}, {dense, dense, in[3].strides()});
    add.dtype = map_dtype(y.dtype());
    add.out = weights;
    add.in[0] = weights;
    add.in[1] = in[3].device_data();
    add.stream = context.stream.handle;
    launch_map(formulas::Add(Attrs{}), add);
  }
  SoftmaxCall softmax;
  softmax.dtype = map_dtype(y.dtype());
  softmax.x = weights;
  softmax.y = weights;
  softmax.outer = count / std::max<int64_t>(s, 1);
  softmax.n = s;
  softmax.causal_rows = attrs.get_bool("causal", false) ? l : 0;
  softmax.zero_blind_rows = true;
  softmax.stream = context.stream.handle;
  launch_softmax(softmax);
  gemm(View{weights, scores, dense}, view_of(v), y.device_data(), y.shape(), y.dtype(), nullptr);
}

}  // namespace

void register_matmul_kernels(BackendRegistration& reg) {
  const std::initializer_list<DType> floats{DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
  reg.kernel("matmul", floats, matmul_kernel);
  reg.kernel("linear", floats, linear_kernel);
  reg.kernel("attention", floats, attention_kernel);
}

}  // namespace kiln::cuda

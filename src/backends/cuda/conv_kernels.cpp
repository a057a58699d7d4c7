// 2-d convolution on cuDNN, forward (bias and ReLU after it) and both
// backward passes (the weight's with the bias gradient), and the transposed
// convolution (the backward-data pass, bias after it), in float32 (no
// TF32: the CPU's precision), float64, float16 and bfloat16 (tensor cores,
// accumulating in float). Activations are described with their strides,
// so strided views need no copy; weights are gathered dense. The algorithm
// is cuDNN's heuristic's first that fits the workspace, chosen once per
// shape, layout and dtype and cached. Built where cuDNN is installed
// (KILN_WITH_CUDNN); elsewhere convolutions on CUDA run on the CPU, visibly.
#include "backends/cuda/conv_kernels.h"

#ifdef KILN_WITH_CUDNN
#include <cudnn.h>

#include <array>
#include <map>
#include <mutex>
#include <tuple>

#include "backends/cuda/on_device.h"
#include "backends/cuda/scratch.h"
#include "ops/conv_attrs.h"
#include "ops/elementwise_formulas.h"

namespace kiln::cuda {
namespace {

void check_dnn(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS) KILN_FAIL("cuDNN: ", what, " failed: ", cudnnGetErrorString(status));
}

// One handle per device, its stream set on every call.
cudnnHandle_t handle_for(const KernelContext& context) {
  static std::mutex mu;
  static std::map<int, cudnnHandle_t> handles;
  cudnnHandle_t h;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = handles.find(context.device.index);
    if (it == handles.end()) {
      check_dnn(cudnnCreate(&h), "cudnnCreate");
      it = handles.emplace(context.device.index, h).first;
    }
    h = it->second;
  }
  check_dnn(cudnnSetStream(h, static_cast<cudaStream_t>(context.stream.handle)), "cudnnSetStream");
  return h;
}

struct Types {
  cudnnDataType_t data, compute;
  cudnnMathType_t math;
};
Types types_of(DType d) {
  switch (d) {
    case DType::Float32:
      return {CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH};
    case DType::Float64:
      return {CUDNN_DATA_DOUBLE, CUDNN_DATA_DOUBLE, CUDNN_FMA_MATH};
    case DType::Float16:
      return {CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH};
    case DType::BFloat16:
      return {CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH};
    default:
      KILN_FAIL("cuDNN convolutions take floating dtypes, not ", dtype_name(d));
  }
}

int narrow(int64_t v) {
  KILN_CHECK(v >= 0 && v <= INT32_MAX, "cuDNN takes sizes and strides below 2^31, got ", v);
  return static_cast<int>(v);
}

// An activation [N, C, H, W] as it lies, and a weight [K, C/g, kh, kw] dense.
struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  Types types{};
  Descriptors(const Shape& xs, const std::vector<int64_t>& x_strides, const Shape& ws, const Shape& ys,
              const std::vector<int64_t>& y_strides, const Conv2dAttrs& a, DType dtype)
      : types(types_of(dtype)) {
    auto tensor = [&](cudnnTensorDescriptor_t* d, const Shape& s, const std::vector<int64_t>& st) {
      check_dnn(cudnnCreateTensorDescriptor(d), "cudnnCreateTensorDescriptor");
      const int dims[4] = {narrow(s[0]), narrow(s[1]), narrow(s[2]), narrow(s[3])};
      const int strides[4] = {narrow(st[0]), narrow(st[1]), narrow(st[2]), narrow(st[3])};
      check_dnn(cudnnSetTensorNdDescriptor(*d, types.data, 4, dims, strides), "cudnnSetTensorNdDescriptor");
    };
    tensor(&x, xs, x_strides);
    tensor(&y, ys, y_strides);
    check_dnn(cudnnCreateFilterDescriptor(&w), "cudnnCreateFilterDescriptor");
    check_dnn(cudnnSetFilter4dDescriptor(w, types.data, CUDNN_TENSOR_NCHW, narrow(ws[0]), narrow(ws[1]), narrow(ws[2]),
                                         narrow(ws[3])),
              "cudnnSetFilter4dDescriptor");
    check_dnn(cudnnCreateConvolutionDescriptor(&conv), "cudnnCreateConvolutionDescriptor");
    check_dnn(cudnnSetConvolution2dDescriptor(conv, narrow(a.padding[0]), narrow(a.padding[1]), narrow(a.stride[0]),
                                              narrow(a.stride[1]), narrow(a.dilation[0]), narrow(a.dilation[1]),
                                              CUDNN_CROSS_CORRELATION, types.compute),
              "cudnnSetConvolution2dDescriptor");
    check_dnn(cudnnSetConvolutionGroupCount(conv, narrow(a.groups)), "cudnnSetConvolutionGroupCount");
    check_dnn(cudnnSetConvolutionMathType(conv, types.math), "cudnnSetConvolutionMathType");
  }
  ~Descriptors() {
    for (auto* t : {x, y})
      if (t) cudnnDestroyTensorDescriptor(t);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
};

constexpr size_t kMaxWorkspace = size_t{256} << 20;

// The pass, shapes, strides, geometry and dtype: what an algorithm is chosen for.
using ConvKey =
    std::tuple<int, int, int, Shape, std::vector<int64_t>, Shape, Shape, std::vector<int64_t>, std::array<int64_t, 7>>;
ConvKey key_of(int pass, const KernelContext& c, DType dtype, const Shape& xs, const std::vector<int64_t>& x_strides,
               const Shape& ws, const Shape& ys, const std::vector<int64_t>& y_strides, const Conv2dAttrs& a) {
  return {pass,
          c.device.index,
          static_cast<int>(dtype),
          xs,
          x_strides,
          ws,
          ys,
          y_strides,
          {a.stride[0], a.stride[1], a.padding[0], a.padding[1], a.dilation[0], a.dilation[1], a.groups}};
}

struct Choice {
  int algo = 0;
  size_t workspace = 0;
};

// The heuristic's first algorithm whose workspace fits, cached per key.
template <typename Perf, typename Find>
Choice choose(const ConvKey& key, Find find, const char* pass) {
  static std::mutex mu;
  static std::map<ConvKey, Choice> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  std::array<Perf, 16> perf{};
  int found = 0;
  find(static_cast<int>(perf.size()), &found, perf.data());
  for (int i = 0; i < found; ++i)
    if (perf[static_cast<size_t>(i)].status == CUDNN_STATUS_SUCCESS &&
        perf[static_cast<size_t>(i)].memory <= kMaxWorkspace)
      return cache
          .emplace(key,
                   Choice{static_cast<int>(perf[static_cast<size_t>(i)].algo), perf[static_cast<size_t>(i)].memory})
          .first->second;
  KILN_FAIL("cuDNN has no ", pass, " algorithm for this convolution within ", kMaxWorkspace >> 20, " MiB of workspace");
}

struct Scalars {
  double one64 = 1, zero64 = 0;
  float one32 = 1, zero32 = 0;
  bool f64;
  explicit Scalars(DType d) : f64(d == DType::Float64) {}
  const void* one() const { return f64 ? static_cast<const void*>(&one64) : &one32; }
  const void* zero() const { return f64 ? static_cast<const void*>(&zero64) : &zero32; }
};

// What every pass sets up: the device, cuDNN's handle on the call's stream,
// the geometry, and scratch memory kept until the pass is queued.
struct ConvPass {
  KernelContext context = kernel_context();
  OnDevice on{context.device.index};
  cudnnHandle_t h = handle_for(context);
  Conv2dAttrs a;
  std::vector<std::unique_ptr<Scratch>> keep;
  explicit ConvPass(const Attrs& attrs) : a(Conv2dAttrs::of(attrs)) {}
};

// A bias over a tensor's channels: [1, channels, 1, 1].
struct BiasDescriptor {
  cudnnTensorDescriptor_t d = nullptr;
  BiasDescriptor(int64_t channels, DType dtype) {
    check_dnn(cudnnCreateTensorDescriptor(&d), "cudnnCreateTensorDescriptor");
    check_dnn(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, types_of(dtype).data, 1, narrow(channels), 1, 1),
              "cudnnSetTensor4dDescriptor");
  }
  ~BiasDescriptor() { cudnnDestroyTensorDescriptor(d); }
  BiasDescriptor(const BiasDescriptor&) = delete;
  BiasDescriptor& operator=(const BiasDescriptor&) = delete;
};

// y (described by y_desc) += bias broadcast over its planes.
void add_channel_bias(const ConvPass& p, cudnnTensorDescriptor_t y_desc, Tensor& y, const void* bias) {
  const BiasDescriptor b(y.shape()[1], y.dtype());
  const Scalars s(y.dtype());
  check_dnn(cudnnAddTensor(p.h, s.one(), b.d, bias, s.one(), y_desc, y.device_data()), "cudnnAddTensor");
}

// dx = the backward-data pass of conv(., w) on dy: conv2d's input gradient,
// and conv_transpose2d's forward.
void backward_data(ConvPass& p, const Tensor& w, const Tensor& dy, Tensor& dx, Descriptors& d) {
  const void* weight = dense_data(w, p.context, p.keep);
  const Choice c = choose<cudnnConvolutionBwdDataAlgoPerf_t>(
      key_of(1, p.context, dx.dtype(), dx.shape(), dx.strides(), w.shape(), dy.shape(), dy.strides(), p.a),
      [&](int n, int* found, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
        check_dnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(p.h, d.w, d.y, d.conv, d.x, n, found, perf),
                  "cudnnGetConvolutionBackwardDataAlgorithm_v7");
      },
      "backward-data");
  Scratch workspace(p.context, c.workspace);
  const Scalars s(dx.dtype());
  check_dnn(cudnnConvolutionBackwardData(p.h, s.one(), d.w, weight, d.y, dy.device_data(), d.conv,
                                         static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), workspace.get(),
                                         c.workspace, s.zero(), d.x, dx.device_data()),
            "cudnnConvolutionBackwardData");
}

// y = conv(x, w) (+ bias), then ReLU where the call fuses it.
void conv2d_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor &x = in[0], &w = in[1];
  Tensor& y = out[0];
  ConvPass p(attrs);
  const void* weight = dense_data(w, p.context, p.keep);
  Descriptors d(x.shape(), x.strides(), w.shape(), y.shape(), y.strides(), p.a, y.dtype());
  const Choice c = choose<cudnnConvolutionFwdAlgoPerf_t>(
      key_of(0, p.context, y.dtype(), x.shape(), x.strides(), w.shape(), y.shape(), y.strides(), p.a),
      [&](int n, int* found, cudnnConvolutionFwdAlgoPerf_t* perf) {
        check_dnn(cudnnGetConvolutionForwardAlgorithm_v7(p.h, d.x, d.w, d.conv, d.y, n, found, perf),
                  "cudnnGetConvolutionForwardAlgorithm_v7");
      },
      "forward");
  Scratch workspace(p.context, c.workspace);
  const Scalars s(y.dtype());
  check_dnn(cudnnConvolutionForward(p.h, s.one(), d.x, x.device_data(), d.w, weight, d.conv,
                                    static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), workspace.get(), c.workspace,
                                    s.zero(), d.y, y.device_data()),
            "cudnnConvolutionForward");
  if (in.size() > 2 && in[2].defined()) add_channel_bias(p, d.y, y, dense_data(in[2], p.context, p.keep));
  if (attrs.get_string("activation", "none") == "relu") {
    MapCall relu;
    relu.geometry = map_geometry(y.shape(), {y.shape(), y.shape()}, {y.strides(), y.strides()});
    relu.dtype = map_dtype(y.dtype());
    relu.out = y.device_data();
    relu.in[0] = y.device_data();
    relu.stream = p.context.stream.handle;
    launch_map(formulas::Relu(attrs), relu);
  }
}

// grad_x from grad_y and the weight.
void conv2d_input_grad_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor &gy = in[0], &w = in[1];
  Tensor& gx = out[0];
  ConvPass p(attrs);
  Descriptors d(gx.shape(), gx.strides(), w.shape(), gy.shape(), gy.strides(), p.a, gx.dtype());
  backward_data(p, w, gy, gx, d);
}

// y = the transpose of conv(., w) [C_in, C_out / groups, kh, kw] applied to
// x (its output padding is in y's shape), plus the bias.
void conv_transpose2d_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor &x = in[0], &w = in[1];
  Tensor& y = out[0];
  ConvPass p(attrs);
  Descriptors d(y.shape(), y.strides(), w.shape(), x.shape(), x.strides(), p.a, y.dtype());
  backward_data(p, w, x, y, d);
  if (in.size() > 2 && in[2].defined()) add_channel_bias(p, d.x, y, dense_data(in[2], p.context, p.keep));
}

// grad_w (dense) from x and grad_y, and grad_bias where asked.
void conv2d_weight_grad_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor &x = in[0], &gy = in[1];
  Tensor& gw = out[0];
  KILN_CHECK(gw.is_contiguous(), "CUDA conv2d_weight_grad writes a dense gradient");
  ConvPass p(attrs);
  Descriptors d(x.shape(), x.strides(), gw.shape(), gy.shape(), gy.strides(), p.a, gw.dtype());
  const Choice c = choose<cudnnConvolutionBwdFilterAlgoPerf_t>(
      key_of(2, p.context, gw.dtype(), x.shape(), x.strides(), gw.shape(), gy.shape(), gy.strides(), p.a),
      [&](int n, int* found, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
        check_dnn(cudnnGetConvolutionBackwardFilterAlgorithm_v7(p.h, d.x, d.y, d.conv, d.w, n, found, perf),
                  "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
      },
      "backward-filter");
  Scratch workspace(p.context, c.workspace);
  const Scalars s(gw.dtype());
  check_dnn(cudnnConvolutionBackwardFilter(p.h, s.one(), d.x, x.device_data(), d.y, gy.device_data(), d.conv,
                                           static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), workspace.get(),
                                           c.workspace, s.zero(), d.w, gw.device_data()),
            "cudnnConvolutionBackwardFilter");
  if (attrs.get_bool("with_bias", false) && out.size() > 1 && out[1].defined()) {
    const BiasDescriptor b(gy.shape()[1], gw.dtype());
    check_dnn(cudnnConvolutionBackwardBias(p.h, s.one(), d.y, gy.device_data(), s.zero(), b.d, out[1].device_data()),
              "cudnnConvolutionBackwardBias");
  }
}

}  // namespace

void register_conv_kernels(BackendRegistration& reg) {
  const std::initializer_list<DType> floats{DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
  reg.kernel("conv2d", floats, conv2d_kernel);
  reg.kernel("conv2d_input_grad", floats, conv2d_input_grad_kernel);
  reg.kernel("conv2d_weight_grad", floats, conv2d_weight_grad_kernel);
  reg.kernel("conv_transpose2d", floats, conv_transpose2d_kernel);
}

}  // namespace kiln::cuda

#else

namespace kiln::cuda {
void register_conv_kernels(BackendRegistration&) {}  // (built without cuDNN)
}  // namespace kiln::cuda

#endif

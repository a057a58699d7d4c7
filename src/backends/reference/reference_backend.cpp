// The reference backend: plain, obviously correct loops (one element at a
// time, index arithmetic, double accumulators) for a few ops: copy, matmul,
// sum, conv2d without groups, dropout (philox's mask, as the CPU's),
// embedding, int32-to-int64 casts, and
// every op with an elementwise formula through its block runner; and
// creation (constants, ranges, random numbers) in its own memory. It exists to prove the backend seam without
// hardware: the test suite checks it against the CPU, and every other op,
// or call its kernel does not take (a grouped convolution), falls back to
// the CPU visibly.
//
// Its memory is a device's as far as the host knows: the addresses it hands
// out are handles (host blocks with their top bits set, which no load can
// follow), decoded only by its kernels and copies. A host read that skips
// the checked path (Tensor::raw_data) faults instead of reading quietly, so
// the whole test suite catches what would read GPU memory from the host.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/philox.h"
#include "kiln/backend.h"
#include "kiln/registry.h"
#include "ops/conv_attrs.h"

namespace kiln::reference {
namespace {

// Non-canonical on x86-64 and AArch64 alike: the top byte set.
constexpr uintptr_t kHandleTag = uintptr_t{0x5a} << 56;

void* to_handle(void* host) { return host ? reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(host) ^ kHandleTag) : nullptr; }
template <typename T = void>
T* from_handle(const void* handle) {
  return handle ? reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(handle) ^ kHandleTag) : nullptr;
}

// The host's caching allocator, behind handles, with the device's own count
// of what it holds.
class HandleAllocator : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    void* handle = to_handle(host_allocator().allocate(nbytes));
    const int64_t now = in_use_ += static_cast<int64_t>(nbytes);
    for (int64_t peak = peak_.load(); now > peak && !peak_.compare_exchange_weak(peak, now);) {
    }
    return handle;
  }
  void deallocate(void* handle, size_t nbytes) override {
    if (handle == nullptr) return;
    host_allocator().deallocate(from_handle(handle), nbytes);
    in_use_ -= static_cast<int64_t>(nbytes);
  }
  AllocatorStats stats() const override {
    AllocatorStats s;
    s.bytes_in_use = in_use_.load();
    s.peak_bytes_in_use = peak_.load();
    return s;
  }

 private:
  std::atomic<int64_t> in_use_{0}, peak_{0};
};

class ReferenceBackend : public Backend {
 public:
  Allocator& allocator(int) override { return allocator_; }
  bool host_memory() const override { return false; }
  void copy_to_host(void* dst, const void* src, size_t nbytes, int) override {
    std::memcpy(dst, from_handle(src), nbytes);
  }
  void copy_from_host(void* dst, const void* src, size_t nbytes, int) override {
    std::memcpy(from_handle(dst), src, nbytes);
  }
  // Creation where the tensor lives, as a device does it: no host staging.
  void fill_affine(void* dst, size_t count, int64_t stride, DType dtype, double start, double step, int) override {
    detail::host_fill_affine(from_handle(dst), count, stride, dtype, start, step);
  }
  void fill_random(void* dst, size_t count, DType dtype, const Draw& draw, int) override {
    detail::host_fill_random(from_handle(dst), count, dtype, draw);
  }
  // Records as a device does (a CUDA graph), so that a compiled graph's
  // recording and replays are exercised without one: the steps run now, and
  // each replay runs them again.
  std::unique_ptr<Recording> record_steps(int, size_t count, const std::function<void(size_t)>& step,
                                          std::string*) override {
    for (size_t i = 0; i < count; ++i) step(i);
    return std::make_unique<StepsAgain>(count, step);
  }

 private:
  class StepsAgain final : public Recording {
   public:
    StepsAgain(size_t count, std::function<void(size_t)> step) : count_(count), step_(std::move(step)) {}
    void replay() override {
      for (size_t i = 0; i < count_; ++i) step_(i);
    }

   private:
    size_t count_;
    std::function<void(size_t)> step_;
  };
  HandleAllocator allocator_;
};

[[maybe_unused]] const bool registered = [] {
  static ReferenceBackend backend;
  register_backend(DeviceType::Reference, &backend);
  return true;
}();

// The element offset of `t` at index `at` of a shape it broadcasts to
// (axes aligned from the right; size-1 axes repeat).
int64_t offset_at(const Tensor& t, const std::vector<int64_t>& at) {
  int64_t off = t.offset();
  const size_t skip = at.size() - t.shape().size();
  for (size_t d = 0; d < t.shape().size(); ++d)
    if (t.shape()[d] != 1) off += at[skip + d] * t.strides()[d];
  return off;
}

// Visits every index of `shape` in row-major order.
template <typename F>
void for_each_index(const Shape& shape, F&& f) {
  std::vector<int64_t> at(shape.size(), 0);
  const int64_t n = numel_of(shape);
  for (int64_t i = 0; i < n; ++i) {
    f(at);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++at[d] < shape[d]) break;
      at[d] = 0;
    }
  }
}

// The host block behind t's storage (offset not applied: offset_at does).
template <typename T>
T* base(const Tensor& t) {
  return from_handle<T>(t.impl().storage->data);
}

template <typename T>
double load(const Tensor& t, int64_t off) {
  return static_cast<double>(static_cast<float>(base<T>(t)[off]));
}
template <>
double load<double>(const Tensor& t, int64_t off) {
  return base<double>(t)[off];
}

// Elementwise math one element at a time, in the op's float or double form.
void run_blocks(const ElementwiseMath& math, const std::vector<Tensor>& in, std::vector<Tensor>& out,
                const Attrs& attrs) {
  KILN_CHECK(math.arity <= 2, "the reference backend runs formulas of one or two operands; this one has ",
             math.arity);
  Tensor& y = out.at(0);
  const DType dt = y.dtype();
  for_each_index(y.shape(), [&](const std::vector<int64_t>& at) {
    const int64_t oy = offset_at(y, at);
    if (dt == DType::Float64) {
      double a[2], r;
      const double* args[2] = {&a[0], &a[1]};
      for (int k = 0; k < math.arity; ++k) a[k] = base<double>(in[k])[offset_at(in[k], at)];
      math.f64(args, &r, 1, attrs);
      base<double>(y)[oy] = r;
      return;
    }
    float a[2], r;
    const float* args[2] = {&a[0], &a[1]};
    for (int k = 0; k < math.arity; ++k) {
      const int64_t o = offset_at(in[k], at);
      a[k] = dt == DType::Float32 ? base<float>(in[k])[o] : dt == DType::Float16 ? static_cast<float>(base<Half>(in[k])[o])
                                                                                  : static_cast<float>(base<BFloat16>(in[k])[o]);
    }
    math.f32(args, &r, 1, attrs);
    if (dt == DType::Float32) base<float>(y)[oy] = r;
    else if (dt == DType::Float16) base<Half>(y)[oy] = Half(r);
    else base<BFloat16>(y)[oy] = BFloat16(r);
  });
}

const BlockRunnerRegistrar runner(DeviceType::Reference, run_blocks,
                                  {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16});

// Any layout to the output's, element by element, byte for byte.
void copy_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const size_t size = in[0].element_size();
  const char* src = base<const char>(in[0]);
  char* dst = base<char>(out[0]);
  for_each_index(out[0].shape(), [&](const std::vector<int64_t>& at) {
    std::memcpy(dst + offset_at(out[0], at) * size, src + offset_at(in[0], at) * size, size);
  });
}

// int32 to int64, which every value survives: the indices the dispatcher
// widens for the embedding loop. Other casts (whose rounding and saturation
// the CPU's kernel defines) run there, visibly.
void cast_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  for_each_index(out[0].shape(), [&](const std::vector<int64_t>& at) {
    base<int64_t>(out[0])[offset_at(out[0], at)] = base<const int32_t>(in[0])[offset_at(in[0], at)];
  });
}

bool int32_to_int64(const KernelCall& call, std::string* why) {
  if (call.attrs.get_dtype("dtype") == DType::Int64) return true;
  if (why) *why = "its loop casts int32 to int64 only";
  return false;
}

// y[..., i, j] = sum_k a[..., i, k] b[..., k, j], batch axes broadcast.
template <typename T>
void matmul_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const Tensor &a = in[0], &b = in[1];
  Tensor& y = out[0];
  const int64_t k_size = a.shape().back();
  for_each_index(y.shape(), [&](const std::vector<int64_t>& at) {
    std::vector<int64_t> ia = at, ib = at;
    const size_t r = at.size();
    double acc = 0;
    for (int64_t k = 0; k < k_size; ++k) {
      ia[r - 1] = k;
      ib[r - 2] = k;
      ib[r - 1] = at[r - 1];
      acc += load<T>(a, offset_at(a, ia)) * load<T>(b, offset_at(b, ib));
    }
    base<T>(y)[offset_at(y, at)] = static_cast<T>(acc);
  });
}

// Every input element added into the output element it reduces to.
template <typename T>
void sum_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor& x = in[0];
  Tensor& y = out[0];
  const int64_t rank = x.dim();
  std::vector<bool> reduced(static_cast<size_t>(rank), attrs.get_ints("axes", {}).empty());
  for (int64_t a : attrs.get_ints("axes", {})) reduced[static_cast<size_t>(a < 0 ? a + rank : a)] = true;
  const bool keepdim = attrs.get_bool("keepdim", false);
  std::vector<double> acc(static_cast<size_t>(y.numel()), 0.0);
  for_each_index(x.shape(), [&](const std::vector<int64_t>& at) {
    int64_t flat = 0;
    for (int64_t d = 0; d < rank; ++d) {
      if (reduced[d] && !keepdim) continue;
      const int64_t size = reduced[d] ? 1 : x.shape()[d];
      flat = flat * size + (reduced[d] ? 0 : at[d]);
    }
    acc[static_cast<size_t>(flat)] += load<T>(x, offset_at(x, at));
  });
  int64_t i = 0;
  for_each_index(y.shape(), [&](const std::vector<int64_t>& at) { base<T>(y)[offset_at(y, at)] = static_cast<T>(acc[i++]); });
}

// y[..., :] = weight[indices[...], :]: rows of the table (negative indices
// counting from the end, as on the CPU), the indices int64 only (declared per input: an int32 call runs on the CPU,
// visibly).
template <typename T>
void embedding_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const Tensor &weight = in[0], &indices = in[1];
  Tensor& y = out[0];
  const int64_t rows = weight.shape()[0], dim = weight.shape()[1];
  int64_t i = 0;
  for_each_index(indices.shape(), [&](const std::vector<int64_t>& at) {
    const int64_t index = base<int64_t>(indices)[offset_at(indices, at)];
    KILN_CHECK(index >= -rows && index < rows, "embedding index ", index, " is out of range for size ", rows,
               " (valid: ", -rows, "..", rows - 1, ")");
    const int64_t row = index < 0 ? index + rows : index;  // from the end, as the CPU's
    for (int64_t j = 0; j < dim; ++j)
      base<T>(y)[y.offset() + i * dim + j] = base<T>(weight)[weight.offset() + row * weight.strides()[0] + j * weight.strides()[1]];
    ++i;
  });
}

// y[n, o, i, j] = b[o] + sum over c, p, q of x[n, c, i*s - pad + p*d, j*s - pad + q*d] w[o, c, p, q],
// taps outside the input counting as zero; then relu where fused.
template <typename T>
void conv2d_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor &x = in[0], &w = in[1];
  const bool has_bias = in.size() > 2 && in[2].defined();
  const bool relu = attrs.get_string("activation", "none") == "relu";
  const Conv2dAttrs c = Conv2dAttrs::of(attrs);
  const auto &stride = c.stride, &pad = c.padding, &dil = c.dilation;
  const int64_t channels = w.shape()[1], kh = w.shape()[2], kw = w.shape()[3], h = x.shape()[2], wd = x.shape()[3];
  Tensor& y = out[0];
  for_each_index(y.shape(), [&](const std::vector<int64_t>& at) {
    double acc = has_bias ? load<T>(in[2], offset_at(in[2], {at[1]})) : 0.0;
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t p = 0; p < kh; ++p)
        for (int64_t q = 0; q < kw; ++q) {
          const int64_t i = at[2] * stride[0] - pad[0] + p * dil[0], j = at[3] * stride[1] - pad[1] + q * dil[1];
          if (i < 0 || i >= h || j < 0 || j >= wd) continue;
          acc += load<T>(x, offset_at(x, {at[0], c, i, j})) * load<T>(w, offset_at(w, {at[1], c, p, q}));
        }
    base<T>(y)[offset_at(y, at)] = static_cast<T>(relu && acc < 0 ? 0.0 : acc);
  });
}

// The conv2d loop takes groups=1 only; grouped calls run on the CPU, visibly.
bool ungrouped(const KernelCall& call, std::string* why) {
  const int64_t groups = call.attrs.get_int("groups", 1);
  if (groups == 1) return true;
  if (why) *why = "groups=" + std::to_string(groups) + ": its loop takes groups=1 only";
  return false;
}

// mask = 1/(1-p) where philox keeps element i (row-major), else 0; y = x * mask.
// Recorded, its counters come from the executor's state at each replay.
template <typename T>
void dropout_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const double p = attrs.get_float("p");
  const RandomDraw draw = take_random(static_cast<uint64_t>(in[0].numel()));
  uint64_t seed = draw.seed, first = draw.first;
  if (draw.state) {
    const auto* state = from_handle<const uint64_t>(draw.state);
    seed = state[0];
    first = state[1] + draw.relative;
  }
  uint64_t i = 0;
  for_each_index(in[0].shape(), [&](const std::vector<int64_t>& at) {
    // In T, as the CPU's kernel: the same mask gives the same products.
    const T mask = philox::keeps(seed, first, i++, 1.0 - p) ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
    base<T>(out[1])[offset_at(out[1], at)] = mask;
    base<T>(out[0])[offset_at(out[0], at)] = base<T>(in[0])[offset_at(in[0], at)] * mask;
  });
}

}  // namespace

KILN_REGISTER_KERNEL_IF("conv2d", Reference, conv2d_kernel<float>, ungrouped, "groups other than 1", DType::Float32);
KILN_REGISTER_KERNEL_IF("conv2d", Reference, conv2d_kernel<double>, ungrouped, "groups other than 1", DType::Float64);
KILN_REGISTER_KERNEL("dropout", Reference, dropout_kernel<float>, DType::Float32);
KILN_REGISTER_KERNEL("dropout", Reference, dropout_kernel<double>, DType::Float64);
KILN_REGISTER_KERNEL("copy", Reference, copy_kernel, DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                     DType::Int32, DType::Int64, DType::UInt8, DType::Bool, DType::Int8);
KILN_REGISTER_KERNEL_IF("cast", Reference, cast_kernel, int32_to_int64, "casts other than int32 to int64",
                        DType::Int32);
KILN_REGISTER_KERNEL("matmul", Reference, matmul_kernel<float>, DType::Float32);
KILN_REGISTER_KERNEL("matmul", Reference, matmul_kernel<double>, DType::Float64);
static const KernelRegistrar embedding_f32("embedding", DeviceType::Reference, {DType::Float32},
                                           Kernel(embedding_kernel<float>).takes({{}, {DType::Int64}}));
static const KernelRegistrar embedding_f64("embedding", DeviceType::Reference, {DType::Float64},
                                           Kernel(embedding_kernel<double>).takes({{}, {DType::Int64}}));
KILN_REGISTER_KERNEL("sum", Reference, sum_kernel<float>, DType::Float32);
KILN_REGISTER_KERNEL("sum", Reference, sum_kernel<double>, DType::Float64);

}  // namespace kiln::reference

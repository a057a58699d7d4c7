#include "kiln/backend.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>

#include "core/philox.h"
#include "core/read_observer.h"
#include "kiln/error.h"
#include "kiln/generator.h"
#include "kiln/parallel.h"
#include "kiln/tensor.h"

namespace kiln {
namespace {

std::atomic<Backend*>* table() {
  static std::atomic<Backend*> backends[kNumDeviceTypes] = {};
  static const bool cpu_registered = [] {
    static HostMemoryBackend cpu;
    backends[static_cast<int>(DeviceType::CPU)].store(&cpu);
    return true;
  }();
  (void)cpu_registered;
  return backends;
}

}  // namespace

void HostMemoryBackend::copy_to_host(void* dst, const void* src, size_t n, int) { std::memcpy(dst, src, n); }
void HostMemoryBackend::copy_from_host(void* dst, const void* src, size_t n, int) { std::memcpy(dst, src, n); }
void HostMemoryBackend::fill_affine(void* dst, size_t count, int64_t stride, DType dtype, double start, double step,
                                    int) {
  detail::host_fill_affine(dst, count, stride, dtype, start, step);
}
void HostMemoryBackend::fill_random(void* dst, size_t count, DType dtype, const Draw& draw, int) {
  detail::host_fill_random(dst, count, dtype, draw);
}

// The span the elements cover goes through the host, read first where the
// stride leaves elements between them untouched.
void Backend::fill_affine(void* dst, size_t count, int64_t stride, DType dtype, double start, double step, int index) {
  if (count == 0) return;
  const size_t nbytes = ((count - 1) * static_cast<size_t>(stride) + 1) * dtype_size(dtype);
  std::unique_ptr<char[]> staging(new char[nbytes]);
  if (stride != 1) copy_to_host(staging.get(), dst, nbytes, index);
  detail::host_fill_affine(staging.get(), count, stride, dtype, start, step);
  copy_from_host(dst, staging.get(), nbytes, index);
}

void Backend::fill_random(void* dst, size_t count, DType dtype, const Draw& draw, int index) {
  std::unique_ptr<char[]> staging(new char[count * dtype_size(dtype)]);
  detail::host_fill_random(staging.get(), count, dtype, draw);
  copy_from_host(dst, staging.get(), count * dtype_size(dtype), index);
}

namespace detail {

void host_fill_affine(void* dst, size_t count, int64_t stride, DType dtype, double start, double step) {
  KILN_DISPATCH_ALL(dtype, {
    auto* p = static_cast<scalar_t*>(dst);
    if (step == 0 && stride == 1) {
      std::fill(p, p + count, static_cast<scalar_t>(start));
    } else {
      parallel_for(static_cast<int64_t>(count), 1 << 15, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) p[i * stride] = static_cast<scalar_t>(start + static_cast<double>(i) * step);
      });
    }
  });
}

namespace {
// The largest value below 1 in T: where a uniform number rounds up to 1.
template <typename T>
T below_one() {
  if constexpr (std::is_same_v<T, Half>) return Half(0.99951171875f);
  else if constexpr (std::is_same_v<T, BFloat16>) return BFloat16(0.99609375f);
  else if constexpr (std::is_same_v<T, float>) return 0x1.fffffep-1f;
  else return static_cast<T>(0x1.fffffffffffffp-1);
}
}  // namespace

// Floating draws in float64 first, so that one seed gives the same numbers
// in every dtype, and a uniform number in a narrower dtype stays below 1.
// Integer draws into any dtype (randint checks that the range fits).
void host_fill_random(void* dst, size_t count, DType dtype, const Backend::Draw& draw) {
  KILN_DISPATCH_ALL(dtype, {
    auto* p = static_cast<scalar_t*>(dst);
    parallel_for(static_cast<int64_t>(count), 1 << 13, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const uint64_t at = static_cast<uint64_t>(i);
        switch (draw.kind) {
          case Backend::Random::Uniform: {
            auto x = static_cast<scalar_t>(philox::uniform(draw.seed, draw.first, at));
            p[i] = static_cast<double>(x) >= 1.0 ? below_one<scalar_t>() : x;
            break;
          }
          case Backend::Random::Normal: p[i] = static_cast<scalar_t>(philox::normal(draw.seed, draw.first, at)); break;
          case Backend::Random::Integers:
            p[i] = static_cast<scalar_t>(static_cast<double>(philox::integer(draw.seed, draw.first, at, draw.low, draw.high)));
            break;
        }
      }
    });
  });
}

}  // namespace detail

void register_backend(DeviceType type, Backend* b) {
  if (b) b->type_ = type;
  table()[static_cast<int>(type)].store(b);
}

Event Backend::record(const Stream& stream) {
  return {stream.device, nullptr,
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count()};
}

double Backend::elapsed_seconds(const Event& from, const Event& to) {
  return static_cast<double>(to.host_ns - from.host_ns) * 1e-9;
}

void Backend::copy_on_device(void* dst, const void* src, size_t nbytes, int index) {
  std::unique_ptr<char[]> staging(new char[nbytes]);
  copy_to_host(staging.get(), src, nbytes, index);
  copy_from_host(dst, staging.get(), nbytes, index);
}

void Backend::copy_across(void* dst, int dst_index, const void* src, int src_index, size_t nbytes) {
  std::unique_ptr<char[]> staging(new char[nbytes]);
  copy_to_host(staging.get(), src, nbytes, src_index);
  copy_from_host(dst, staging.get(), nbytes, dst_index);
}

KernelContext kernel_context() {
  KILN_CHECK(detail::in_kernel(), "kernel_context() is for kernels: it says where the running kernel runs");
  const Device device = detail::t_kernel_device;
  Backend& b = backend(device.type);
  return {device, b.current_stream(device.index), &b.allocator(device.index), detail::t_kernel_timed};
}

namespace {
thread_local detail::RecordedDraws* t_recorded_draws = nullptr;
}  // namespace

detail::RecordedDraws* detail::set_recorded_draws(RecordedDraws* draws) {
  RecordedDraws* before = t_recorded_draws;
  t_recorded_draws = draws;
  return before;
}

RandomDraw take_random(uint64_t n) {
  RandomDraw d;
  if (detail::RecordedDraws* recorded = t_recorded_draws) {
    d.state = recorded->state;
    d.relative = recorded->taken;
    recorded->taken += Generator::counters(n);
    return d;
  }
  Generator& g = default_generator();
  d.seed = g.initial_seed();
  d.first = g.take(n);
  return d;
}

namespace {

std::atomic<detail::BackendLoader> g_backend_loader{nullptr};

// A slot's backend library, tried once (what went wrong kept for the
// message); not again from inside the load, which asks for backends too.
struct Autoload {
  std::mutex mu;
  std::array<bool, kNumDeviceTypes> tried{};
  std::array<std::string, kNumDeviceTypes> why;
};
Autoload& autoload() {
  static Autoload a;
  return a;
}
thread_local bool t_loading_backend = false;

Backend* load_backend_library(DeviceType type) {
  const detail::BackendLoader loader = g_backend_loader.load();
  const auto i = static_cast<size_t>(type);
  if (loader == nullptr || t_loading_backend || std::string(device_type_name(type)) == "?") return nullptr;
  Autoload& a = autoload();
  std::lock_guard<std::mutex> lock(a.mu);
  if (!a.tried[i]) {
    t_loading_backend = true;
    try {
      a.tried[i] = loader(type, &a.why[i]);
    } catch (...) {
      t_loading_backend = false;
      throw;
    }
    t_loading_backend = false;
  }
  return table()[i].load();
}

}  // namespace

void detail::set_backend_loader(BackendLoader loader) { g_backend_loader.store(loader); }

Backend* find_backend(DeviceType type) {
  if (Backend* b = table()[static_cast<int>(type)].load()) return b;
  return load_backend_library(type);
}

std::string detail::no_backend_message(DeviceType type) {
  std::string present;
  for (int t = 0; t < kNumDeviceTypes; ++t)
    if (find_backend(static_cast<DeviceType>(t)))
      present += std::string(present.empty() ? "" : ", ") + device_type_name(static_cast<DeviceType>(t));
  std::string m = "no " + std::string(device_type_name(type)) + " backend in this build of Kiln (it has: " + present + ")";
  std::string why;
  if (!t_loading_backend) {  // (inside a load this thread holds the lock)
    Autoload& a = autoload();
    std::lock_guard<std::mutex> lock(a.mu);
    why = a.why[static_cast<size_t>(type)];
  }
  if (!why.empty()) return m + "; " + why;
  if (type == DeviceType::CUDA)
    m += "; the CUDA backend is a library of its own: build Kiln with -DKILN_CUDA=on, and libkiln_cuda.so "
         "beside libkiln.so loads when a CUDA device is first asked for (or name it in KILN_PLUGIN_PATH)";
  return m;
}

Backend& backend(DeviceType type) {
  if (Backend* b = find_backend(type)) return *b;
  KILN_FAIL(detail::no_backend_message(type));
}

Allocator* get_allocator(Device device) { return &backend(device.type).allocator(device.index); }

void copy_between(Device dst_device, void* dst, Device src_device, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  Backend &from = backend(src_device.type), &to = backend(dst_device.type);
  if (from.host_memory() && to.host_memory()) {
    std::memcpy(dst, src, nbytes);
  } else if (from.host_memory()) {
    to.copy_from_host(dst, src, nbytes, dst_device.index);
  } else if (to.host_memory()) {
    from.copy_to_host(dst, src, nbytes, src_device.index);
  } else if (src_device == dst_device) {
    from.copy_on_device(dst, src, nbytes, src_device.index);
  } else if (src_device.type == dst_device.type) {
    from.copy_across(dst, dst_device.index, src, src_device.index, nbytes);
  } else {  // between two kinds of device: through the host
    std::unique_ptr<char[]> staging(new char[nbytes]);
    from.copy_to_host(staging.get(), src, nbytes, src_device.index);
    to.copy_from_host(dst, staging.get(), nbytes, dst_device.index);
  }
}

void copy_between_async(Device dst_device, void* dst, Device src_device, const void* src, size_t nbytes,
                        const Stream& stream) {
  if (nbytes == 0) return;
  Backend &from = backend(src_device.type), &to = backend(dst_device.type);
  if (from.host_memory() && !to.host_memory()) {
    to.copy_from_host_async(dst, src, nbytes, stream);
  } else if (!from.host_memory() && to.host_memory()) {
    from.copy_to_host_async(dst, src, nbytes, stream);
  } else {
    copy_between(dst_device, dst, src_device, src, nbytes);
  }
}

}  // namespace kiln

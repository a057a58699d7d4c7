#pragma once
// Running a oneDNN primitive with few host costs per call. Making the oneDNN
// memory objects of a call's arguments, their map and a stream costs about
// 2 us, a sixth of a batch-1 depthwise convolution's whole time. So each
// thread keeps the bound arguments of its calls by primitive and buffers
// (layers of one geometry share a primitive, each with buffers of its own);
// a call with the same buffers as an earlier one runs on them as they are.
// The primitives run here must live as long as the process, as the callers'
// primitive caches keep them.
#include <array>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>

namespace kiln::cpu::onednn {

class CallArgs {
 public:
  // A buffer: its layout (alive during the call) and its data.
  CallArgs& buffer(int id, const dnnl::memory::desc& desc, const void* data);
  // A one-value operand (a zero point, a scale), passed by value.
  template <typename T>
  CallArgs& value(int id, const dnnl::memory::desc& desc, T v) {
    static_assert(sizeof(T) == 4, "one-value operands are 32-bit");
    Value& slot = values_.at(static_cast<size_t>(values_count_++));
    slot.id = id;
    slot.desc = &desc;
    std::memcpy(&slot.bits, &v, 4);
    return *this;
  }
  // The primitive's scratchpad: a buffer of the calling thread's, grown as needed.
  CallArgs& scratchpad(const dnnl::memory::desc& desc);

  struct Buffer {
    int id;
    const dnnl::memory::desc* desc;
    const void* data;
  };
  struct Value {
    int id;
    const dnnl::memory::desc* desc;
    uint32_t bits;
  };
  std::array<Buffer, 10> buffers_{};
  int buffers_count_ = 0;
  std::array<Value, 6> values_{};
  int values_count_ = 0;
  const dnnl::memory::desc* scratchpad_ = nullptr;
};

// A call site's primitive, found once per thread count rather than looked up
// by its whole geometry (and scales) on every call: one memo per call site.
class PrimitiveMemo {
 public:
  // The primitive of memo (null: none) for the calling thread count, else
  // make()'s, kept there when not null.
  template <typename P, typename Make>
  static const P* find_or_make(PrimitiveMemo* memo, int threads, Make make) {
    if (const void* kept = memo ? memo->find(threads) : nullptr) return static_cast<const P*>(kept);
    const P* p = make();
    if (memo && p) memo->keep(threads, p);
    return p;
  }

 private:
  const void* find(int threads) const {
    std::lock_guard<std::mutex> lock(mu_);
    return threads == threads_ ? primitive_ : nullptr;
  }
  void keep(int threads, const void* primitive) {
    std::lock_guard<std::mutex> lock(mu_);
    threads_ = threads;
    primitive_ = primitive;
  }

  mutable std::mutex mu_;
  int threads_ = 0;
  const void* primitive_ = nullptr;
};

// Runs prim on args, on the calling thread's stream, and waits for it.
void execute(const dnnl::primitive& prim, const CallArgs& args);

}  // namespace kiln::cpu::onednn

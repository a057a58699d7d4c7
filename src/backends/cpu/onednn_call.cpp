#include "backends/cpu/onednn_call.h"

#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "backends/cpu/onednn_engine.h"

namespace kiln::cpu::onednn {

CallArgs& CallArgs::buffer(int id, const dnnl::memory::desc& desc, const void* data) {
  buffers_.at(static_cast<size_t>(buffers_count_++)) = {id, &desc, data};
  return *this;
}

CallArgs& CallArgs::scratchpad(const dnnl::memory::desc& desc) {
  scratchpad_ = &desc;
  return *this;
}

namespace {

// One call site's arguments as oneDNN memory. The one-value operands' memory
// wraps `values`, which each call overwrites.
struct Bound {
  const void* prim = nullptr;
  std::array<std::pair<int, const void*>, 10> buffers{};
  int buffers_count = 0;
  std::array<int, 6> value_ids{};
  std::array<uint32_t, 6> values{};
  int values_count = 0;
  const void* scratch = nullptr;
  std::unordered_map<int, dnnl::memory> args;

  bool same_buffers(const CallArgs& a, const void* scratch_now) const {
    if (a.buffers_count_ != buffers_count || a.values_count_ != values_count || scratch_now != scratch) return false;
    for (int i = 0; i < buffers_count; ++i) {
      const CallArgs::Buffer& b = a.buffers_[static_cast<size_t>(i)];
      if (buffers[static_cast<size_t>(i)] != std::pair<int, const void*>(b.id, b.data)) return false;
    }
    for (int i = 0; i < values_count; ++i)
      if (value_ids[static_cast<size_t>(i)] != a.values_[static_cast<size_t>(i)].id) return false;
    return true;
  }
};

// The calling thread's scratchpad, grown to the largest a primitive asked for.
void* thread_scratch(size_t bytes) {
  thread_local std::unique_ptr<uint8_t[]> buffer;
  thread_local size_t capacity = 0;
  if (bytes > capacity) {
    capacity = bytes;
    buffer.reset(new (std::align_val_t(64)) uint8_t[capacity]);
  }
  return buffer.get();
}

// A call's identity: its primitive and buffers, hashed.
size_t call_hash(const void* prim, const CallArgs& a, const void* scratch) {
  size_t h = std::hash<const void*>()(prim);
  auto mix = [&h](size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  for (int i = 0; i < a.buffers_count_; ++i) {
    mix(static_cast<size_t>(a.buffers_[static_cast<size_t>(i)].id));
    mix(std::hash<const void*>()(a.buffers_[static_cast<size_t>(i)].data));
  }
  for (int i = 0; i < a.values_count_; ++i) mix(static_cast<size_t>(a.values_[static_cast<size_t>(i)].id));
  mix(std::hash<const void*>()(scratch));
  return h;
}

// Calls kept per thread: more than the oneDNN layers of the models run (a
// ResNet-152 has 155); past that (eager calls on ever new buffers, models
// loaded and dropped) they are all let go and bound anew. Each holds a few
// memory objects of about 1 KB, so this bounds them at a few MB a thread.
constexpr size_t kKeptCalls = 1024;

}  // namespace

void execute(const dnnl::primitive& prim, const CallArgs& a) {
  thread_local dnnl::stream stream(engine());
  thread_local std::unordered_multimap<size_t, std::unique_ptr<Bound>> calls;
  void* scratch = a.scratchpad_ && a.scratchpad_->get_size() > 0 ? thread_scratch(a.scratchpad_->get_size()) : nullptr;
  const size_t key = call_hash(prim.get(), a, scratch);
  Bound* bound = nullptr;
  for (auto [it, end] = calls.equal_range(key); it != end && !bound; ++it)
    if (it->second->prim == prim.get() && it->second->same_buffers(a, scratch)) bound = it->second.get();
  if (!bound) {
    if (calls.size() == kKeptCalls) calls.clear();
    bound = calls.emplace(key, std::make_unique<Bound>())->second.get();
    bound->prim = prim.get();
    bound->buffers_count = a.buffers_count_;
    for (int i = 0; i < a.buffers_count_; ++i) {
      const CallArgs::Buffer& b = a.buffers_[static_cast<size_t>(i)];
      bound->buffers[static_cast<size_t>(i)] = {b.id, b.data};
      bound->args.emplace(b.id, wrap(*b.desc, b.data));
    }
    bound->values_count = a.values_count_;
    for (int i = 0; i < a.values_count_; ++i) {
      const CallArgs::Value& v = a.values_[static_cast<size_t>(i)];
      bound->value_ids[static_cast<size_t>(i)] = v.id;
      bound->args.emplace(v.id, wrap(*v.desc, &bound->values[static_cast<size_t>(i)]));
    }
    bound->scratch = scratch;
    if (scratch) bound->args.emplace(DNNL_ARG_SCRATCHPAD, wrap(*a.scratchpad_, scratch));
  }
  for (int i = 0; i < a.values_count_; ++i) bound->values[static_cast<size_t>(i)] = a.values_[static_cast<size_t>(i)].bits;
  prim.execute(stream, bound->args);
  stream.wait();
}

}  // namespace kiln::cpu::onednn

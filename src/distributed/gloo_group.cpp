// Process groups over Gloo: collectives on tensors, run in call order on the
// group's communication thread, with the group's timeout; a failure becomes
// an error naming the collective, this rank, and (from the liveness beats)
// the rank that stopped answering.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "distributed/job.h"
#include "distributed/shared_memory.h"

namespace kiln::dist {

namespace {

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

// float16 and bfloat16 add in float; the rest in their own type.
template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;

template <typename T, typename F>
void combine(void* c, const void* a, const void* b, size_t n, F f) {
  T* out = static_cast<T*>(c);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(f(static_cast<Acc<T>>(x[i]), static_cast<Acc<T>>(y[i])));
}

template <typename T>
ReduceFn reducer_as(ReduceOp op) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {  // Gloo's own, vectorized
    if (op == ReduceOp::Max) return &gloo::max<T>;
    if (op == ReduceOp::Min) return &gloo::min<T>;
    return &gloo::sum<T>;
  } else {
    if (op == ReduceOp::Max)
      return [](void* c, const void* a, const void* b, size_t n) { combine<T>(c, a, b, n, [](auto x, auto y) { return std::max(x, y); }); };
    if (op == ReduceOp::Min)
      return [](void* c, const void* a, const void* b, size_t n) { combine<T>(c, a, b, n, [](auto x, auto y) { return std::min(x, y); }); };
    return [](void* c, const void* a, const void* b, size_t n) { combine<T>(c, a, b, n, [](auto x, auto y) { return x + y; }); };
  }
}

template <typename T>
void divide_as(void* data, size_t n, int by) {
  T* p = static_cast<T*>(data);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<Acc<T>>(p[i]) / static_cast<Acc<T>>(by));
}

struct Reduction {
  ReduceFn fn = nullptr;
  void (*divide)(void*, size_t, int) = nullptr;  // Mean: floating dtypes only
};

Reduction reduction_for(DType dtype, ReduceOp op, const char* what) {
  switch (dtype) {
    case DType::Float32: return {reducer_as<float>(op), &divide_as<float>};
    case DType::Float64: return {reducer_as<double>(op), &divide_as<double>};
    case DType::Float16: return {reducer_as<Half>(op), &divide_as<Half>};
    case DType::BFloat16: return {reducer_as<BFloat16>(op), &divide_as<BFloat16>};
    case DType::Int32: return {reducer_as<int32_t>(op), nullptr};
    case DType::Int64: return {reducer_as<int64_t>(op), nullptr};
    case DType::UInt8: return {reducer_as<uint8_t>(op), nullptr};
    case DType::Int8: return {reducer_as<int8_t>(op), nullptr};
    case DType::Bool: break;
  }
  KILN_FAIL("dist: ", what, " cannot reduce bool tensors; cast to uint8 (Max is 'any', Min is 'all') first");
}

Reduction checked_reduction(DType dtype, ReduceOp op, const char* what) {
  Reduction r = reduction_for(dtype, op, what);
  KILN_CHECK(op != ReduceOp::Mean || r.divide, "dist: ", what, " with Mean takes a floating tensor, got ", dtype_name(dtype),
             "; reduce with Sum and divide, or cast first");
  return r;
}

void check_tensor(const Tensor& t, const char* what, const char* role = "a") {
  KILN_CHECK(t.defined() && t.is_contiguous() && t.device().type == DeviceType::CPU, "dist: ", what, " takes ", role,
             " contiguous CPU tensor, got ", t.defined() ? t.meta_str() : "an undefined one",
             "; call .contiguous() (and .to(cpu_device())) first");
}

// Gloo sizes buffers by sizeof(T) alone; the reduction knows the real type.
template <typename Options>
void set_buffer(Options& o, bool output, void* data, size_t n, size_t element_size) {
  auto set = [&](auto* typed) {
    if (output) o.setOutput(typed, n);
    else o.setInput(typed, n);
  };
  switch (element_size) {
    case 1: set(static_cast<uint8_t*>(data)); break;
    case 2: set(static_cast<uint16_t*>(data)); break;
    case 4: set(static_cast<uint32_t*>(data)); break;
    default: set(static_cast<uint64_t*>(data)); break;
  }
}

}  // namespace

// A Gloo group: the job it belongs to, its context over the job's TCP
// device, the shared-memory all-reduce when its ranks share a host, and the
// thread its collectives run on.
class GlooGroup final : public ProcessGroup {
 public:
  std::shared_ptr<detail::Job> job;
  std::vector<int> world_ranks;  // by group rank
  int my_rank = 0;           // in the group
  std::string name;          // "the world", "group 1.2"
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::unique_ptr<detail::SharedMemoryReduce> local;  // all-reduce among ranks of one host
  uint32_t next_tag = 0;   // the communication thread's
  uint64_t issued = 0;     // the caller's
  int children = 0;        // sub-groups made from this one
  std::atomic<int64_t> collectives{0}, busy_ns{0};
  std::shared_ptr<std::atomic<int64_t>> waited_ns = std::make_shared<std::atomic<int64_t>>(0);
  detail::CommThread comm;  // last: its thread stops before the rest goes

  int rank() const override { return my_rank; }
  int size() const override { return static_cast<int>(world_ranks.size()); }
  const Place& place() const override { return job->place; }
  const std::vector<int>& ranks() const override { return world_ranks; }
  std::chrono::milliseconds timeout() const override { return job->timeout; }
  std::string backend() const override { return "gloo"; }
  bool shared_memory() const override { return local != nullptr; }
  Stats stats() const override {
    return {collectives.load(), static_cast<double>(busy_ns.load()) * 1e-9, static_cast<double>(waited_ns->load()) * 1e-9};
  }

  Work all_reduce_async(Tensor t, ReduceOp op) override;
  Work broadcast_async(Tensor t, int root) override;
  Work all_gather_async(Tensor out, Tensor in) override;
  Work reduce_scatter_async(Tensor out, Tensor in, ReduceOp op) override;
  Work barrier_async() override;
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) override;

 private:
  // Queues a collective (or, for a caller that waits for it at once, runs
  // it here when nothing is queued); its error names it, this rank, and why.
  Work submit(const char* what, std::function<void()> run) {
    const bool here = take_waited_at_once();
    const std::string label = std::string(what) + " #" + std::to_string(++issued) + " of " + name;
    auto task = [this, label, run = std::move(run), caller = std::this_thread::get_id()] {
      detail::Liveness& live = *job->liveness;
      live.doing(label);
      const auto start = std::chrono::steady_clock::now();
      try {
        run();
        const int64_t took =
            std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
        busy_ns += took;
        if (std::this_thread::get_id() == caller) *waited_ns += took;  // ran in place: the caller waited it out
        ++collectives;
      } catch (const std::exception& e) {
        const auto settle = std::min(job->timeout, std::chrono::milliseconds(1500));
        const std::string why = live.diagnose(world_ranks, settle);
        live.doing(label + " (failed)");
        KILN_FAIL("dist: ", label, " failed on rank ", job->place.rank, " (", live.where(job->place.rank), ") after at most ",
                  job->timeout.count(), " ms: ", e.what(), ". ", why);
      }
      live.doing(label + " (done)");
    };
    return Work(here ? comm.run_or_post(std::move(task)) : comm.post(std::move(task)), waited_ns);
  }
  uint32_t tag() { return next_tag++; }
};

Work GlooGroup::all_reduce_async(Tensor t, ReduceOp op) {
  check_tensor(t, "all_reduce");
  const Reduction r = checked_reduction(t.dtype(), op, "all_reduce");
  GlooGroup& g = *this;
  return g.submit("all_reduce", [&g, t, op, r] {
    const size_t n = static_cast<size_t>(t.numel());
    if (g.local) {
      g.local->all_reduce(t.raw_data(), n, t.element_size(), r.fn, g.job->timeout);
    } else {
      gloo::AllreduceOptions o(g.context);
      set_buffer(o, true, t.raw_data(), n, t.element_size());
      o.setReduceFunction(r.fn);
      o.setTag(g.tag());
      o.setTimeout(g.job->timeout);
      gloo::allreduce(o);
    }
    if (op == ReduceOp::Mean) r.divide(t.raw_data(), n, static_cast<int>(g.world_ranks.size()));
  });
}

Work GlooGroup::broadcast_async(Tensor t, int root) {
  check_tensor(t, "broadcast");
  KILN_CHECK(root >= 0 && root < size(), "dist: broadcast from rank ", root, " in a group of ", size());
  GlooGroup& g = *this;
  return g.submit("broadcast", [&g, t, root] {
    gloo::BroadcastOptions o(g.context);
    o.setOutput(static_cast<uint8_t*>(t.raw_data()), static_cast<size_t>(t.numel()) * t.element_size());
    o.setRoot(root);
    o.setTag(g.tag());
    o.setTimeout(g.job->timeout);
    gloo::broadcast(o);
  });
}

Work GlooGroup::all_gather_async(Tensor out, Tensor in) {
  check_tensor(in, "all_gather", "an input");
  check_tensor(out, "all_gather", "an output");
  check_gather(out, in);
  GlooGroup& g = *this;
  return g.submit("all_gather", [&g, out, in] {
    gloo::AllgatherOptions o(g.context);
    const size_t bytes = static_cast<size_t>(in.numel()) * in.element_size();
    o.setInput(static_cast<uint8_t*>(in.raw_data()), bytes);
    o.setOutput(static_cast<uint8_t*>(out.raw_data()), bytes * g.world_ranks.size());
    o.setTag(g.tag());
    o.setTimeout(g.job->timeout);
    gloo::allgather(o);
  });
}

Work GlooGroup::reduce_scatter_async(Tensor out, Tensor in, ReduceOp op) {
  check_tensor(in, "reduce_scatter", "an input");
  check_tensor(out, "reduce_scatter", "an output");
  const Reduction r = checked_reduction(in.dtype(), op, "reduce_scatter");
  check_scatter(out, in);
  const int64_t n = size();
  GlooGroup& g = *this;
  return g.submit("reduce_scatter", [&g, out, in, op, r, n] {
    // Every rank sends part k to rank k (an all-to-all), then adds up what it got.
    const size_t part = static_cast<size_t>(out.numel()), bytes = part * out.element_size();
    std::vector<uint8_t> received(bytes * static_cast<size_t>(n));
    gloo::AlltoallOptions o(g.context);
    o.setInput(static_cast<uint8_t*>(in.raw_data()), bytes * static_cast<size_t>(n));
    o.setOutput(received.data(), received.size());
    o.setTag(g.tag());
    o.setTimeout(g.job->timeout);
    gloo::alltoall(o);
    std::memcpy(out.raw_data(), received.data(), bytes);
    for (int64_t k = 1; k < n; ++k) r.fn(out.raw_data(), out.raw_data(), received.data() + bytes * static_cast<size_t>(k), part);
    if (op == ReduceOp::Mean) r.divide(out.raw_data(), part, static_cast<int>(n));
  });
}

Work GlooGroup::barrier_async() {
  GlooGroup& g = *this;
  return g.submit("barrier", [&g] {
    gloo::BarrierOptions o(g.context);
    o.setTag(g.tag());
    o.setTimeout(g.job->timeout);
    gloo::barrier(o);
  });
}

std::shared_ptr<ProcessGroup> GlooGroup::new_group(const std::vector<int>& members) {
  GlooGroup& parent = *this;
  std::set<int> seen;
  for (int r : members)
    KILN_CHECK(r >= 0 && r < size() && seen.insert(r).second, "dist: new_group takes distinct ranks of a group of ",
               size(), " (0..", size() - 1, "), got ", r, seen.count(r) ? " twice" : "");
  KILN_CHECK(!members.empty(), "dist: new_group needs at least one rank");
  // Every member names it the same way: its parent's name and how many the parent made.
  const std::string name = (parent.name == "the world" ? "group " : parent.name + ".") + std::to_string(++parent.children);
  auto it = std::find(members.begin(), members.end(), parent.my_rank);
  if (it == members.end()) return nullptr;
  auto g = std::make_shared<GlooGroup>();
  g->job = parent.job;
  for (int r : members) g->world_ranks.push_back(parent.world_ranks[static_cast<size_t>(r)]);
  g->my_rank = static_cast<int>(it - members.begin());
  g->name = name;
  g->context = std::make_shared<gloo::rendezvous::Context>(g->my_rank, static_cast<int>(members.size()));
  g->context->setTimeout(g->job->timeout);
  gloo::rendezvous::PrefixStore prefixed("kiln/" + name, *g->job->store);
  try {
    g->context->connectFullMesh(prefixed, g->job->device);
  } catch (const std::exception& e) {
    KILN_FAIL("dist: making ", name, " failed on rank ", g->job->place.rank, ": ", e.what(),
              ". Every rank of the group it was made from must call new_group with the same ranks, in the same order");
  }
  g->local = detail::SharedMemoryReduce::join(*g->job->store, "kiln/shm/" + name, g->my_rank, g->context->size, g->world_ranks,
                                              g->job->timeout);
  return g;
}

std::shared_ptr<ProcessGroup> make_world(std::shared_ptr<detail::Job> job, std::shared_ptr<gloo::rendezvous::Context> context) {
  auto g = std::make_shared<GlooGroup>();
  g->job = std::move(job);
  for (int r = 0; r < g->job->place.world_size; ++r) g->world_ranks.push_back(r);
  g->my_rank = g->job->place.rank;
  g->name = "the world";
  g->context = std::move(context);
  g->local = detail::SharedMemoryReduce::join(*g->job->store, "kiln/shm/world", g->my_rank, g->job->place.world_size,
                                              g->world_ranks, g->job->timeout);
  return g;
}

}  // namespace kiln::dist

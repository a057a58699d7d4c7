#include "backends/cpu/onednn_gemm_bf16.h"

#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>

#include "backends/cpu/onednn_call.h"
#include "backends/cpu/onednn_engine.h"

namespace kiln::cpu::onednn {
namespace {

using dnnl::memory;

struct Descs {
  memory::desc a, b, c;
};

// The operands as strided [rows, cols] matrices: a transposed one is read
// down its columns, as BLAS reads it.
Descs descs(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
  const auto bf16 = memory::data_type::bf16;
  return {memory::desc({m, k}, bf16, ta ? memory::dims{1, lda} : memory::dims{lda, 1}),
          memory::desc({k, n}, bf16, tb ? memory::dims{1, ldb} : memory::dims{ldb, 1}),
          memory::desc({m, n}, bf16, memory::dims{ldc, 1})};
}

struct Prepared {
  dnnl::matmul prim;
  memory::desc scratchpad;
};

using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, int>;

const Prepared* prepared(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc,
                         bool accumulate) {
  static std::mutex mu;
  static std::map<Key, Prepared> cache;
  std::lock_guard<std::mutex> lock(mu);
  // Inside a parallel region (a batch of products split over threads) a
  // primitive runs on one thread: its thread count is part of the key.
  const Key key{ta, tb, m, n, k, lda, ldb, ldc, accumulate, get_num_threads()};
  auto it = cache.find(key);
  if (it != cache.end()) return it->second.prim ? &it->second : nullptr;
  Prepared p;
  try {
    const Descs d = descs(ta, tb, m, n, k, lda, ldb, ldc);
    dnnl::primitive_attr attr = base_attr();
    if (accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(d.a, d.b, d.c), attr, engine());
    p = {dnnl::matmul(pd), pd.scratchpad_desc()};
  } catch (const dnnl::error&) {
  }
  auto& stored = cache.emplace(key, p).first->second;
  return stored.prim ? &stored : nullptr;
}

}  // namespace

bool native_bf16() {
  static const bool native = dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core_bf16;
  return native;
}

bool gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b,
               int64_t ldb, uint16_t* c, int64_t ldc, bool accumulate) {
  const Prepared* p = prepared(ta, tb, m, n, k, lda, ldb, ldc, accumulate);
  if (!p) return false;
  const Descs d = descs(ta, tb, m, n, k, lda, ldb, ldc);
  CallArgs args;
  args.buffer(DNNL_ARG_SRC, d.a, a).buffer(DNNL_ARG_WEIGHTS, d.b, b).buffer(DNNL_ARG_DST, d.c, c);
  execute(p->prim, args.scratchpad(p->scratchpad));
  return true;
}

}  // namespace kiln::cpu::onednn

#include "graph/derived_constants.h"

#include <map>
#include <mutex>
#include <tuple>

namespace kiln::graph {
namespace {

struct Entry {
  std::weak_ptr<StorageImpl> source;  // to tell a reused address from the same storage
  uint32_t version = 0;
  std::weak_ptr<TensorImpl> derived;
};

using Key = std::tuple<const StorageImpl*, int64_t, Shape, Strides, std::string>;

}  // namespace

Tensor shared_derived_constant(const Tensor& source, const std::string& kind, const std::function<Tensor()>& make) {
  static std::mutex mu;
  static std::map<Key, Entry> cache;
  const Storage& storage = source.impl().storage;
  const uint32_t version = storage->version.load();
  const Key key{storage.get(), source.offset(), source.shape(), source.strides(), kind};
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end() && it->second.source.lock() == storage && it->second.version == version)
    if (auto derived = it->second.derived.lock()) return Tensor(derived);
  Tensor made = make();
  cache[key] = {storage, version, made.impl_ptr()};
  if (cache.size() > 1024)  // drop what no graph holds any more
    for (auto e = cache.begin(); e != cache.end();) e = e->second.derived.expired() ? cache.erase(e) : std::next(e);
  return made;
}

int add_derived_constant(Graph& g, int source, const std::string& kind, const std::string& suffix,
                         const std::function<Tensor()>& make) {
  // Keyed on the captured tensor, not on an intermediate derivation: no
  // graph may hold that once the derived one replaced it, and a second graph
  // would make the intermediate, then everything derived from it, anew.
  // (A root that nothing else holds any more, like a batch-norm-folded
  // weight, is gone: then the key is the intermediate, shared by no one.)
  const Value& from = g.values[source];
  const std::shared_ptr<TensorImpl> root = from.derived_root.lock();
  const Tensor key = root ? Tensor(root) : from.tensor;
  std::string derivation = root ? from.derivation + ", then " + kind : kind;
  Tensor derived = shared_derived_constant(key, derivation, make);
  const std::string name = (from.name.empty() ? std::string("weight") : from.name) + suffix;
  const int id = add_constant(g, derived, name);
  g.values[id].derived_root = key.impl_ptr();
  g.values[id].derivation = std::move(derivation);
  return id;
}

}  // namespace kiln::graph

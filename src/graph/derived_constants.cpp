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
  Tensor derived = shared_derived_constant(g.values[source].tensor, kind, make);
  const std::string& name = g.values[source].name;
  return add_constant(g, derived, (name.empty() ? std::string("weight") : name) + suffix);
}

}  // namespace kiln::graph

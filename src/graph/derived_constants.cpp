#include "graph/derived_constants.h"

#include <map>
#include <mutex>
#include <tuple>

namespace kiln::graph {
namespace {

struct Source {  // a source's storage, to tell a reused address from the same storage, and its version then
  std::weak_ptr<StorageImpl> storage;
  uint32_t version = 0;
  bool unchanged(const Tensor& t) const {
    return storage.lock() == t.impl().storage && version == t.impl().storage->version.load();
  }
};

struct Entry {
  std::vector<Source> sources;
  std::weak_ptr<TensorImpl> derived;
};

using Place = std::tuple<const StorageImpl*, int64_t, Shape, Strides>;
using Key = std::pair<std::vector<Place>, std::string>;

}  // namespace

Tensor shared_derived_constant(const std::vector<Tensor>& sources, const std::string& kind,
                               const std::function<Tensor()>& make) {
  static std::mutex mu;
  static std::map<Key, Entry> cache;
  Key key{{}, kind};
  Entry entry;
  for (const Tensor& s : sources) {
    const Storage& storage = s.impl().storage;
    key.first.emplace_back(storage.get(), s.offset(), s.shape(), s.strides());
    entry.sources.push_back({storage, storage->version.load()});
  }
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) {
    bool unchanged = true;
    for (size_t i = 0; i < sources.size(); ++i) unchanged = unchanged && it->second.sources[i].unchanged(sources[i]);
    if (unchanged)
      if (auto derived = it->second.derived.lock()) return Tensor(derived);
  }
  Tensor made = make();
  entry.derived = made.impl_ptr();
  cache[key] = std::move(entry);
  if (cache.size() > 1024)  // drop what no graph holds any more
    for (auto e = cache.begin(); e != cache.end();) e = e->second.derived.expired() ? cache.erase(e) : std::next(e);
  return made;
}

Tensor shared_derived_constant(const Tensor& source, const std::string& kind, const std::function<Tensor()>& make) {
  return shared_derived_constant(std::vector<Tensor>{source}, kind, make);
}

int add_derived_constant(Graph& g, const std::vector<int>& sources, const std::string& kind, const std::string& suffix,
                         const std::function<Tensor()>& make) {
  // Keyed on the captured tensors, not on an intermediate derivation: no
  // graph may hold that once the derived one replaced it, and a second graph
  // would make the intermediate, then everything derived from it, anew.
  // (A root that nothing else holds any more, like a batch-norm-folded
  // weight, is gone: then the key is the intermediate, shared by no one.)
  // A derivation from several values keys on all of their roots.
  std::vector<Tensor> keys;
  std::string derivation;
  for (int source : sources) {
    const Value& from = g.values[source];
    std::vector<Tensor> roots;
    for (const auto& weak : from.derived_roots)
      if (auto root = weak.lock()) roots.emplace_back(root);
    if (roots.empty() || roots.size() != from.derived_roots.size()) {
      keys.push_back(from.tensor);
    } else {
      keys.insert(keys.end(), roots.begin(), roots.end());
      derivation += from.derivation + ", then ";
    }
  }
  derivation += kind;
  Tensor derived = shared_derived_constant(keys, derivation, make);
  const Value& first = g.values[sources.at(0)];
  const std::string name = (first.name.empty() ? std::string("weight") : first.name) + suffix;
  const int id = add_constant(g, derived, name);
  for (const Tensor& k : keys) g.values[id].derived_roots.push_back(k.impl_ptr());
  g.values[id].derivation = std::move(derivation);
  return id;
}

int add_derived_constant(Graph& g, int source, const std::string& kind, const std::string& suffix,
                         const std::function<Tensor()>& make) {
  return add_derived_constant(g, std::vector<int>{source}, kind, suffix, make);
}

}  // namespace kiln::graph

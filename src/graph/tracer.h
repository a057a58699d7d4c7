#pragma once
// Builds a Graph by running a program eagerly and recording every op the
// dispatcher runs. Tensors are identified by their memory (storage, offset,
// shape, strides, dtype), so the detached aliases autograd saves for backward
// map to the values they alias. Each entry holds a weak reference to its
// storage: an entry whose storage died is stale (and, since storages are made
// with make_shared, its address cannot be reused while the entry exists), so
// tracing keeps no tensor alive that eager execution would have freed.
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>

#include "core/cell_frames.h"
#include "graph/ir.h"

namespace kiln::graph::detail {

// What the tracer knows of the Cell being traced: its parameters and buffers
// by storage, for naming captured tensors and for error messages.
struct CaptureNames {
  std::unordered_map<const StorageImpl*, std::string> params;  // storage -> "layers.0.weight"
  std::unordered_map<std::string, std::string> cell_types;     // "layers.0" -> "Dense"
  std::unordered_map<const void*, std::string> cell_paths;      // Cell -> "layers.0" ("" for the root)
  std::string root_type;                                        // the traced Cell's type, or "function"
};

class Tracer {
 public:
  explicit Tracer(const CaptureNames& names) : names_(names) {}
  int add_input(const Tensor& t, std::string name);
  void record(const OpDef& op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
              const Attrs& attrs);
  // The value a tensor holds: a known one, or a newly captured parameter/constant.
  int value_of(const Tensor& t);
  bool is_varying(const Tensor& t) const;  // an input, a parameter, random, or computed from them
  std::string where() const;               // "Cell 'block' (MyBlock), inside Cell 'block.fc' (Dense), after op 'linear'"
  std::string cell_name(const kiln::detail::CellFrame& frame) const;
  std::string producer_of(const Tensor& t) const;
  Graph take() { return std::move(graph_); }
  Graph& graph() { return graph_; }

 private:
  using Key = std::tuple<const StorageImpl*, int64_t, Shape, Strides, DType>;
  static Key key_of(const Tensor& t);

  const CaptureNames& names_;
  Graph graph_;
  struct Entry {
    int id;
    std::weak_ptr<StorageImpl> storage;
  };
  std::map<Key, Entry> ids_;
  const Entry* find(const Tensor& t) const;  // null when unknown or stale
  int add(Value v, bool varying);
  std::vector<bool> varying_;                // per value id
  void remember(const Tensor& t, int id) { ids_[key_of(t)] = {id, t.impl().storage}; }
  std::vector<Tensor> inputs_;
  std::string last_param_;
  std::string last_op_;
};

// Runs `program` under a tracer on this thread; the graph's outputs are its results.
Graph trace(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& program,
            const std::vector<Tensor>& inputs, const CaptureNames& names, std::vector<Tensor>* eager_outputs);

}  // namespace kiln::graph::detail

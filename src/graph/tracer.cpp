#include "graph/tracer.h"

#include "core/read_observer.h"
#include "kiln/caller_language.h"
#include "ops/dispatch_hooks.h"

namespace kiln::graph::detail {
namespace {

// The tracer of this thread, or null.
thread_local Tracer* t_tracer = nullptr;

TensorMeta meta_of(const Tensor& t) { return {true, t.shape(), t.dtype(), t.device()}; }

void trace_call(const OpDef& op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                const Attrs& attrs) {
  t_tracer->record(op, inputs, outputs, attrs);
}

// Throws when `t` holds a value that varies from run to run of the traced program.
void check_read(const Tensor& t, const char* what) {
  if (t_tracer == nullptr || !t.defined() || !t_tracer->is_varying(t)) return;
  Tracer* tracer = t_tracer;
  t_tracer = nullptr;  // building the message reads nothing, but a read now would not recurse
  std::string msg = "while tracing " + tracer->where() + ": " + what + " on " + t.meta_str() + ", " +
                    tracer->producer_of(t) +
                    ". A compiled graph cannot look at tensor values: they change from run to run, so a "
                    "branch or a number taken from them would be frozen at the traced values. Express a "
                    "choice with " + in_caller_language("kiln::where(condition, a, b)", "kiln.where(condition, a, b)") +
                    " (or select), or return the tensor from the compiled function and read it afterwards. "
                    "If the number is a length that a loop runs over, the loop is unrolled once per traced "
                    "length: pad or bucket the lengths to a few sizes and pass the length as an int argument "
                    "(each new int compiles once), or use nn.LSTM/GRU/RNN, which loop inside one op";
  t_tracer = tracer;
  throw Error(msg);
}

bool varies(const Tensor& t) { return t_tracer != nullptr && t.defined() && t_tracer->is_varying(t); }

// Puts a tracer in charge of this thread's ops and reads for its lifetime.
struct ActiveTracer {
  explicit ActiveTracer(Tracer* t)
      : prev(t_tracer),
        prev_ops(kiln::detail::t_op_observer),
        prev_reads(kiln::detail::t_read_observer),
        prev_query(kiln::detail::t_varying_query) {
    t_tracer = t;
    kiln::detail::t_op_observer = &trace_call;
    kiln::detail::t_read_observer = &check_read;
    kiln::detail::t_varying_query = &varies;
  }
  ~ActiveTracer() {
    t_tracer = prev;
    kiln::detail::t_op_observer = prev_ops;
    kiln::detail::t_read_observer = prev_reads;
    kiln::detail::t_varying_query = prev_query;
  }
  Tracer* prev;
  kiln::detail::OpObserver prev_ops;
  kiln::detail::ReadObserver prev_reads;
  kiln::detail::VaryingQuery prev_query;
};

}  // namespace

Tracer::Key Tracer::key_of(const Tensor& t) {
  return {t.impl().storage.get(), t.offset(), t.shape(), t.strides(), t.dtype()};
}

const Tracer::Entry* Tracer::find(const Tensor& t) const {
  auto it = ids_.find(key_of(t));
  if (it == ids_.end() || it->second.storage.expired()) return nullptr;
  return &it->second;
}

int Tracer::add_input(const Tensor& t, std::string name) {
  Value v;
  v.kind = ValueKind::Input;
  v.meta = meta_of(t);
  v.name = std::move(name);
  int id = add(std::move(v), true);
  graph_.inputs.push_back(id);
  remember(t, id);
  inputs_.push_back(t);
  return id;
}

int Tracer::value_of(const Tensor& t) {
  if (const Entry* e = find(t)) return e->id;
  Value v;
  v.meta = meta_of(t);
  v.tensor = t;
  auto p = names_.params.find(t.impl().storage.get());
  if (p != names_.params.end()) {
    v.kind = ValueKind::Param;
    v.name = p->second;
  } else {
    v.kind = ValueKind::Constant;
  }
  bool varying = v.kind != ValueKind::Constant;
  int id = add(std::move(v), varying);
  remember(t, id);
  return id;
}

int Tracer::add(Value v, bool varying) {
  int id = graph_.add_value(std::move(v));
  varying_.resize(graph_.values.size());
  varying_[id] = varying;
  return id;
}

void Tracer::record(const OpDef& op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                    const Attrs& attrs) {
  Node n;
  n.op = &op;
  n.attrs = attrs;
  for (const Tensor& t : inputs) {
    int id = t.defined() ? value_of(t) : -1;
    n.inputs.push_back(id);
    if (id >= 0 && graph_.values[id].kind == ValueKind::Param) last_param_ = graph_.values[id].name;
  }
  last_op_ = op.name;
  if (graph_.has_side_effects(n) && !op.has_tag(kTagRandom)) {
    for (int dst : written_inputs(n)) {
      if (graph_.values[dst].kind != ValueKind::Constant) continue;
      // Filling a constant made while tracing, from constants, before anything read it:
      // the captured tensor already holds the result.
      bool from_constants = true, read_before = false;
      for (int id : n.inputs)
        if (id >= 0 && id != dst && graph_.values[id].kind != ValueKind::Constant) from_constants = false;
      for (const Node& m : graph_.nodes)
        for (int id : m.inputs) read_before = read_before || id == dst;
      KILN_CHECK(from_constants && !read_before, "while tracing ", where(), ": '", op.name,
                 "' writes into a tensor captured from outside the compiled function (",
                 dtype_name(graph_.values[dst].meta.dtype), shape_str(graph_.values[dst].meta.shape),
                 "); every run of the compiled graph would write it again. Register it as a buffer of the Cell "
                 "(register_buffer) so the graph owns its updates, or pass it in as an input");
      return;
    }
  }
  // Results computed from constants alone (shape arithmetic) are constants too.
  bool varying = op.has_tag(kTagRandom);
  for (int id : n.inputs) varying = varying || (id >= 0 && varying_[id]);
  const int index = static_cast<int>(graph_.nodes.size());
  graph_.nodes.push_back(std::move(n));
  for (size_t i = 0; i < outputs.size(); ++i) {
    Value v;
    v.kind = ValueKind::Result;
    v.meta = meta_of(outputs[i]);
    v.producer = index;
    v.output_index = static_cast<int>(i);
    int id = add(std::move(v), varying);
    graph_.nodes[index].outputs.push_back(id);
    remember(outputs[i], id);
  }
}

bool Tracer::is_varying(const Tensor& t) const {
  const Entry* e = find(t);
  return e && varying_[e->id];
}

}  // namespace kiln::graph::detail

namespace kiln::jit {
bool varies_between_runs(const Tensor& t) {
  return graph::detail::t_tracer != nullptr && t.defined() && graph::detail::t_tracer->is_varying(t);
}
}  // namespace kiln::jit

namespace kiln::graph::detail {

std::string Tracer::producer_of(const Tensor& t) const {
  const Entry* e = find(t);
  if (!e) return "";
  const Value& v = graph_.values[e->id];
  if (v.kind == ValueKind::Input) return "input '" + v.name + "'";
  if (v.kind == ValueKind::Param) return "parameter '" + v.name + "'";
  return "the result of '" + graph_.nodes[v.producer].name() + "'";
}

std::string Tracer::cell_name(const kiln::detail::CellFrame& frame) const {
  auto path = names_.cell_paths.find(frame.cell);
  if (path == names_.cell_paths.end() || path->second.empty()) return "Cell '" + *frame.type + "'";
  return "Cell '" + path->second + "' (" + *frame.type + ")";
}

std::string Tracer::where() const {
  // The user's own Cell, the innermost one being called: errors come from
  // what its construct does, even when they surface inside a built-in layer.
  const auto& frames = kiln::detail::cell_frames();
  for (size_t i = frames.size(); i-- > 0;) {
    if (frames[i].library) continue;
    std::string s = cell_name(frames[i]);
    if (i + 1 < frames.size()) s += ", inside " + cell_name(frames.back());
    if (!last_op_.empty()) s += ", after op '" + last_op_ + "'";
    return s;
  }
  std::string cell = names_.root_type;
  std::string s = "Cell '" + cell + "'";
  auto dot = last_param_.rfind('.');
  if (dot != std::string::npos) {
    std::string path = last_param_.substr(0, dot);
    auto type = names_.cell_types.find(path);
    s = "Cell '";
    s += path;
    s += "' (";
    s += type != names_.cell_types.end() ? type->second : std::string("Cell");
    s += ")";
  }
  if (!last_op_.empty()) {
    s += ", after op '";
    s += last_op_;
    s += "'";
  }
  return s;
}

Graph trace(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& program,
            const std::vector<Tensor>& inputs, const CaptureNames& names, std::vector<Tensor>* eager_outputs) {
  Tracer tracer(names);
  for (size_t i = 0; i < inputs.size(); ++i) tracer.add_input(inputs[i], "input" + std::to_string(i));
  std::vector<Tensor> outs;
  {
    ActiveTracer active(&tracer);
    outs = program(inputs);
  }
  Graph& g = tracer.graph();
  for (const Tensor& t : outs) {
    KILN_CHECK(t.defined(), "the traced function returned an undefined tensor; return only defined tensors");
    g.outputs.push_back(tracer.value_of(t));
  }
  if (eager_outputs) *eager_outputs = outs;
  return tracer.take();
}

}  // namespace kiln::graph::detail

// ONNX control flow: If, Loop and Scan run their subgraphs with Kiln ops.
// Traced, a branch is taken and a loop unrolled for the values seen while
// tracing, which the compiled graph fixes: a condition or trip count that is
// a constant of the model, an input bound by value (the session compiles per
// value) or computed from shapes alone. One computed from the inputs' data
// throws DataDependentControlFlow, and the session runs the model node by node.
#include <algorithm>

#include "kiln/functional.h"
#include "kiln/jit.h"
#include "runtime/onnx_graph.h"

namespace kiln::runtime {
namespace {

// The value of a scalar that decides control flow.
double decide(const OnnxNode& n, const Tensor& t, const char* what) {
  if (jit::varies_between_runs(t))
    throw DataDependentControlFlow(n.where() + ": " + what +
                                   " is computed from the inputs' values, so no single compiled graph holds every "
                                   "run; the model runs node by node");
  if (t.numel() != 1) n.fail(what, " must hold one value, got ", shape_str(t.shape()));
  return n.scalar_value(t, what);
}

std::vector<Tensor> run_if(const OnnxNode& n, const std::vector<Tensor>& in,
                           const Subgraphs& subgraphs, const std::vector<Tensor>& outer) {
  const bool cond = decide(n, input(n, in, 0), "the condition") != 0;
  const std::string want = cond ? "then_branch" : "else_branch";
  auto it = subgraphs.find(want);
  if (it == subgraphs.end()) n.fail("it has no ", want);
  const OnnxGraph& branch = *it->second;
  if (branch.num_inputs() != 0) n.fail("its ", want, " takes ", branch.num_inputs(), " inputs; If's branches take none");
  return branch.run({}, outer);
}

const OnnxGraph& body_of(const OnnxNode& n, const Subgraphs& subgraphs) {
  auto it = subgraphs.find("body");
  if (it == subgraphs.end()) n.fail("it has no body graph");
  return *it->second;
}

// An empty scan output for a loop that ran no iteration, shaped as far as
// the body's output declares it.
Tensor empty_scan_output(const OnnxNode& n, const ::onnx::ValueInfoProto& info) {
  if (!info.type().has_tensor_type()) n.unsupported("scan output '", info.name(), "' is not a tensor");
  const auto& t = info.type().tensor_type();
  Shape shape{0};
  for (const auto& d : t.shape().dim()) shape.push_back(d.has_dim_value() ? d.dim_value() : 0);
  return Tensor::empty(shape, onnx_io::kiln_dtype(t.elem_type(), n.where() + " scan output"));
}

// Loop (opset 1 on): `for (i = 0; i < M && cond; ++i)`, with M or cond
// optional; the body maps (i, cond, carried...) to (cond, carried..., scan...).
std::vector<Tensor> run_loop(const OnnxNode& n, const std::vector<Tensor>& in,
                             const Subgraphs& subgraphs, const std::vector<Tensor>& outer) {
  const OnnxGraph& body = body_of(n, subgraphs);
  const bool has_max = !in.empty() && in[0].defined(), has_cond = in.size() > 1 && in[1].defined();
  if (!has_max && !has_cond)
    n.fail("it has neither a trip count nor a condition, so it would never stop; give one of them");
  const size_t carried = in.size() > 2 ? in.size() - 2 : 0;
  if (body.num_inputs() != carried + 2)
    n.fail("its body takes ", body.num_inputs(), " inputs; with ", carried, " loop-carried values it should take ",
           carried + 2, " (iteration number, condition, the values)");
  if (body.num_outputs() < carried + 1)
    n.fail("its body has ", body.num_outputs(), " outputs; it should have at least ", carried + 1,
           " (condition and the loop-carried values)");
  const size_t scans = body.num_outputs() - 1 - carried;
  const int64_t max_trips = has_max ? static_cast<int64_t>(decide(n, in[0], "the trip count M")) : -1;
  bool cond = has_cond ? decide(n, in[1], "the condition") != 0 : true;
  std::vector<Tensor> values(in.begin() + 2, in.end());
  std::vector<std::vector<Tensor>> scanned(scans);
  for (int64_t i = 0; (!has_max || i < max_trips) && cond; ++i) {
    std::vector<Tensor> args{scalar_tensor(static_cast<double>(i), DType::Int64), scalar_tensor(1.0, DType::Bool)};
    args.insert(args.end(), values.begin(), values.end());
    std::vector<Tensor> out = body.run(args, outer);
    if (has_cond) cond = decide(n, out[0], "the condition its body computes") != 0;
    for (size_t k = 0; k < carried; ++k) values[k] = out[1 + k];
    for (size_t k = 0; k < scans; ++k) scanned[k].push_back(out[1 + carried + k]);
  }
  for (size_t k = 0; k < scans; ++k)
    values.push_back(scanned[k].empty() ? empty_scan_output(n, body.proto().output(static_cast<int>(1 + carried + k)))
                                        : stack(scanned[k], 0));
  return values;
}

// Scan (opset 9 on): the body runs once per position along each scan input's
// axis, with the state carried from one run to the next.
std::vector<Tensor> run_scan(const OnnxNode& n, const std::vector<Tensor>& in,
                             const Subgraphs& subgraphs, const std::vector<Tensor>& outer) {
  if (n.opset() < 9) n.unsupported("Scan before opset 9 (with a batch axis and sequence_lens) is not supported");
  const OnnxGraph& body = body_of(n, subgraphs);
  const int64_t num_scan = n.required_i("num_scan_inputs");
  if (num_scan < 1 || num_scan > static_cast<int64_t>(in.size()))
    n.fail("num_scan_inputs is ", num_scan, " but the node has ", in.size(), " inputs");
  const size_t m = static_cast<size_t>(num_scan), states = in.size() - m;
  if (body.num_inputs() != in.size()) n.fail("its body takes ", body.num_inputs(), " inputs; the node gives ", in.size());
  if (body.num_outputs() < states) n.fail("its body has fewer outputs than the ", states, " state values");
  const size_t scans = body.num_outputs() - states;
  auto per_input = [&](const char* name, size_t count) {
    std::vector<int64_t> v = n.ints(name, std::vector<int64_t>(count, 0));
    if (v.size() != count) n.fail(name, " has ", v.size(), " values for ", count, " ", name[5] == 'i' ? "inputs" : "outputs");
    return v;
  };
  const auto in_axes = per_input("scan_input_axes", m), in_dirs = per_input("scan_input_directions", m);
  const auto out_axes = per_input("scan_output_axes", scans), out_dirs = per_input("scan_output_directions", scans);
  std::vector<Tensor> sequences;
  std::vector<int64_t> axes;
  int64_t length = -1;
  for (size_t j = 0; j < m; ++j) {
    const Tensor& x = input(n, in, states + j);
    axes.push_back(normalize_axis(n, in_axes[j], x.dim()));
    const int64_t len = x.shape()[axes[j]];
    if (length >= 0 && len != length)
      n.fail("scan input ", j, " has ", len, " positions along its axis, the others ", length);
    length = len;
    sequences.push_back(x);
  }
  if (length == 0) n.unsupported("scanning over zero positions is not supported");
  std::vector<Tensor> state(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(states));
  std::vector<std::vector<Tensor>> scanned(scans);
  for (int64_t t = 0; t < length; ++t) {
    std::vector<Tensor> args = state;
    for (size_t j = 0; j < m; ++j) args.push_back(sequences[j].select(axes[j], in_dirs[j] ? length - 1 - t : t));
    std::vector<Tensor> out = body.run(args, outer);
    for (size_t k = 0; k < states; ++k) state[k] = out[k];
    for (size_t k = 0; k < scans; ++k) scanned[k].push_back(out[states + k]);
  }
  for (size_t k = 0; k < scans; ++k) {
    if (out_dirs[k]) std::reverse(scanned[k].begin(), scanned[k].end());
    const int64_t axis = normalize_axis(n, out_axes[k], scanned[k][0].dim() + 1);
    state.push_back(stack(scanned[k], axis));
  }
  return state;
}

}  // namespace

const std::map<std::string, ControlFlow>& control_flow_ops() {
  static const std::map<std::string, ControlFlow> table = {{"If", run_if}, {"Loop", run_loop}, {"Scan", run_scan}};
  return table;
}

}  // namespace kiln::runtime

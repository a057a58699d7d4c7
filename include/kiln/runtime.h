#pragma once
// The inference runtime: loads an ONNX model (written by Kiln or by
// torch.onnx.export; opsets 6 to 28) or a MindIR model (MindSpore's export)
// into Kiln's graph IR and runs it with the
// same passes and kernels as graph mode.
//
//   kiln::InferenceSession session("model.onnx");
//   std::vector<kiln::Tensor> outputs = session.run({images});
//
// A graph is compiled per input shape (a new batch size compiles once more)
// and kept; run() may be called from many threads at once. Inputs holding inf
// or NaN run node by node instead, so their answer is the same on every run
// and at every batch size (the compiled graph's fastest kernels do not all
// treat inf and NaN alike). A model whose If or Loop decides on a value
// computed from the inputs' data runs node by node, once that is seen.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

// A model input or output: -1 in shape for a dimension of any size.
struct TensorInfo {
  std::string name;
  DType dtype = DType::Float32;
  std::vector<int64_t> shape;
  std::vector<std::string> dim_names;  // "batch" for symbolic dimensions, "" for fixed ones
  bool shape_known = true;             // false when the file does not say
  std::string str() const;             // "input: float32 [batch, 1, 28, 28]"
  // Whether t has this dtype and, where the shape is known, its rank and
  // every fixed dimension.
  bool accepts(const Tensor& t) const;
};

struct SessionOptions {
  // "cpu", or another backend in host memory ("reference"): the compiled
  // graph and the model's weights live there, and so do the outputs.
  std::string device = "cpu";
  int threads = 0;             // intra-op threads for the process; 0 leaves the current setting
  // Runs of each input signature measure how many of those threads pay off
  // (all of them on a quiet machine, fewer when other processes hold cores:
  // see kiln/thread_governor.h). false keeps every run on all of them, which
  // also keeps results bit-identical from run to run.
  bool adapt_threads = true;
  // 0: run node by node (eager); 1: compiled graph, no optimizing passes;
  // 2: compiled and optimized (constant folding, batch-norm folding, fusion, layouts).
  int optimization_level = 2;
  // "float32" (fp32), or half precision: "bfloat16" (bf16) or "float16" (fp16):
  // the model runs under autocast in that dtype (matrix products, convolutions
  // and attention in it; reductions, softmax and norms in float32), and its
  // outputs come back in the dtypes the model declares.
  std::string precision = "float32";
  // Input axes padded up to a few sizes, so that a model called with many
  // lengths compiles once per bucket: {"input_ids", 1, {32, 64, 128}}. The
  // outputs are cut back to the call's size (jit::DynamicAxis says how).
  // For axes whose padded positions cannot change the real ones' results:
  // a batch, or a sequence a mask hides. run_in_place takes shapes as given.
  struct Bucket {
    std::string input;
    int axis = 0;
    std::vector<int64_t> sizes;
    double pad_value = 0;
  };
  std::vector<Bucket> buckets;
};

class InferenceSession {
 public:
  explicit InferenceSession(const std::string& path, SessionOptions options = {});
  static InferenceSession from_bytes(const std::string& bytes, SessionOptions options = {},
                                     const std::string& name = "<memory>");
  ~InferenceSession();
  InferenceSession(InferenceSession&&) noexcept;
  InferenceSession& operator=(InferenceSession&&) noexcept;

  // Inputs in the model's order. Throws naming the input and the expected
  // shape and dtype when one does not fit.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs);
  // The same without copying the inputs or the outputs: `fill(i, slot)`
  // writes input i into `slot`, a tensor of shapes[i] (and the model's dtype)
  // that is the compiled graph's own input buffer, and `read(outputs)` takes
  // what it needs from the outputs, which are valid only during the call.
  // Models that read an input's values to decide shapes, inputs holding inf
  // or NaN, and optimization level 0 run as run() does, on the slots.
  using FillInput = std::function<void(size_t index, Tensor& slot)>;
  using ReadOutputs = std::function<void(const std::vector<Tensor>& outputs)>;
  void run_in_place(const std::vector<Shape>& shapes, const FillInput& fill, const ReadOutputs& read);

  const std::vector<TensorInfo>& inputs() const;
  const std::vector<TensorInfo>& outputs() const;
  const std::map<std::string, std::string>& metadata() const;
  int opset() const;
  const std::string& producer() const;
  // What the session rewrote in the model before running it, in words ("20
  // Conv, 1 Gemm on int8 kernels": a quantized model's QDQ groups), "" when nothing.
  const std::string& rewrites() const;
  // Graphs compiled so far (one per input signature, or per bucket), by the
  // compiled functions not running at the moment.
  int compiles() const;

 private:
  struct Impl;
  InferenceSession(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

// The ONNX op types (default domain) the runtime can load.
std::vector<std::string> supported_onnx_ops();
// The MindSpore primitives a MindIR model may apply, each with the Kiln op
// that reads it ("Conv2D" -> "conv2d"), and the bookkeeping ones ("" for those).
std::vector<std::pair<std::string, std::string>> supported_mindspore_primitives();

}  // namespace kiln

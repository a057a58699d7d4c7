// Picking a model's program by its format, and what every program checks.
#include "runtime/program.h"

#include "runtime/mindir_program.h"
#include "runtime/onnx_program.h"

namespace kiln::runtime {

bool looks_like_mindir(const std::string& bytes) {
  // Field 1 (ir_version) as a string: tag 0x0a. ONNX's is a varint: tag 0x08.
  return bytes.size() >= 2 && static_cast<uint8_t>(bytes[0]) == 0x0a;
}

std::unique_ptr<Program> load_program(const std::string& bytes, const std::string& what) {
  if (looks_like_mindir(bytes)) return std::make_unique<MindirProgram>(bytes, what);
  return std::make_unique<OnnxProgram>(bytes, what);
}

void Program::check_inputs(const std::vector<Tensor>& in) const {
  const auto& expected = inputs();
  KILN_CHECK(in.size() == expected.size(), "the model takes ", expected.size(), " input(s) (", [&] {
    std::string s;
    for (size_t i = 0; i < expected.size(); ++i) s += (i ? "; " : "") + expected[i].str();
    return s;
  }(), "), got ", in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const TensorInfo& want = expected[i];
    KILN_CHECK(in[i].defined(), "input '", want.name, "' is missing; expected ", want.str());
    KILN_CHECK(want.accepts(in[i]), "input '", want.name, "' expects ", want.str().substr(want.name.size() + 2),
               ", got ", dtype_name(in[i].dtype()), " ", shape_str(in[i].shape()));
  }
}

}  // namespace kiln::runtime

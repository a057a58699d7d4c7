#pragma once
// A small ONNX model builder for tests that write their own graphs:
// inputs and outputs, initializers from Kiln tensors, nodes and attributes.
#include <onnx/onnx_pb.h>

#include <fstream>
#include <string>
#include <vector>

#include "io/onnx_tensor.h"
#include "kiln/tensor.h"
#include "support/scratch.h"

namespace kiln::testing {

struct OnnxBuilder {
  ::onnx::ModelProto m;
  ::onnx::GraphProto* g;
  OnnxBuilder() {
    m.set_ir_version(8);
    m.add_opset_import()->set_version(17);
    g = m.mutable_graph();
  }
  void io(bool input, const std::string& name, int elem, const Shape& shape) {
    auto* v = input ? g->add_input() : g->add_output();
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(elem);
    for (int64_t d : shape) {  // a negative size: a named dimension of any size
      auto* dim = t->mutable_shape()->add_dim();
      if (d < 0) {
        std::string name = "d";  // (appended: GCC 12 warns falsely about "d" + std::string)
        name += std::to_string(-d);
        dim->set_dim_param(name);
      } else {
        dim->set_dim_value(d);
      }
    }
  }
  void init(const std::string& name, const Tensor& t) {
    auto* p = g->add_initializer();
    onnx_io::to_proto(t, *p);
    p->set_name(name);
  }
  ::onnx::NodeProto* node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out) {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(out[0] + "_node");
    for (auto& i : in) n->add_input(i);
    for (auto& o : out) n->add_output(o);
    return n;
  }
  static void ints(::onnx::NodeProto* n, const std::string& name, std::vector<int64_t> values) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INTS);
    for (int64_t v : values) a->add_ints(v);
  }
  static void integer(::onnx::NodeProto* n, const std::string& name, int64_t value) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(value);
  }
  static void real(::onnx::NodeProto* n, const std::string& name, float value) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::FLOAT);
    a->set_f(value);
  }
  std::string save(const std::string& file) {
    // A folder per file, as making a scratch folder empties it.
    std::string path = (scratch_dir("model_" + file) / file).string();
    std::ofstream(path, std::ios::binary) << m.SerializeAsString();
    return path;
  }
};

}  // namespace kiln::testing

#pragma once
// The Open Inference Protocol v2 (REST) infer request and response bodies:
// JSON tensors, and the binary tensor extension (a JSON header of
// Inference-Header-Content-Length bytes, then the raw tensors in order).
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/tensor.h"

namespace kiln::serve {

// A problem with the request: answered 400 with the message.
class BadRequest : public Error {
 public:
  explicit BadRequest(const std::string& msg) : Error(msg) {}
};

// More work than the server takes in one request: answered 413.
class TooLarge : public BadRequest {
 public:
  explicit TooLarge(const std::string& msg) : BadRequest(msg) {}
};

// The multi-index of element `flat` of a row-major tensor: "[0, 0, 14, 14]".
std::string position_of(int64_t flat, const Shape& shape);

struct InferRequest {
  std::string id;
  std::vector<std::pair<std::string, Tensor>> inputs;  // as given, in request order
  std::vector<std::string> outputs;                    // requested names; empty: all
  std::vector<bool> binary_outputs;                    // per requested output
  bool binary_by_default = false;                      // parameters.binary_data_output
};

// header_length: the Inference-Header-Content-Length value, or -1 when the
// body is all JSON. Throws BadRequest saying what is malformed, and TooLarge
// (before decoding any data) when an input's batch axis exceeds max_batch.
InferRequest parse_infer_request(const std::string& body, long long header_length,
                                 int64_t max_batch = INT64_MAX, const std::string& max_batch_source = "");

struct InferResponse {
  std::string body;
  long long header_length = -1;  // set when binary tensors follow the JSON
};
// outputs: (name, tensor) of what the request asked for, with whether each goes binary.
InferResponse make_infer_response(const std::string& model, const std::string& version, const std::string& id,
                                  const std::vector<std::pair<std::string, Tensor>>& outputs,
                                  const std::vector<bool>& binary);

}  // namespace kiln::serve

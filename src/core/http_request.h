#pragma once
// One HTTP/1.1 request to a studio (or any plain-HTTP server), over
// Boost.Beast, with deadlines: the data layer reads studio:// objects with
// it and the run tracker sends metrics. Header-only Beast keeps TLS and
// client libraries out of libkiln.
#include <chrono>
#include <string>

namespace kiln::detail {

struct HttpRequest {
  std::string method = "GET";
  std::string server;  // http://HOST[:PORT]
  std::string path;    // already percent-encoded
  std::string bearer_token;
  std::string body, content_type;
  std::chrono::seconds connect_timeout{10};
  std::chrono::seconds timeout{300};  // for sending the request and reading the whole answer
};

struct HttpAnswer {
  int status = 0;
  std::string body;
};

// Throws kiln::Error naming the server and what failed when it cannot be
// reached or answers malformed HTTP; any status is an answer.
HttpAnswer http_request(const HttpRequest& request);

}  // namespace kiln::detail

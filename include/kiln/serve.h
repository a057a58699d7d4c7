#pragma once
// `kiln serve`: models behind HTTP, speaking the Open Inference Protocol v2
// (REST): health, server and model metadata, readiness, and infer with JSON
// tensors or the binary tensor extension; the model repository endpoints
// (index, load, unload); Prometheus metrics at /metrics.
//
//   kiln::ServeOptions o;
//   o.model = "model.onnx";          // or o.model_repository = "models/"
//   kiln::Server server(o);
//   int port = server.start();       // listening and ready
//   ...
//   server.shutdown();               // not ready, in-flight requests finish, stop
#include <cstddef>
#include <memory>
#include <string>

namespace kiln {

struct ServeOptions {
  std::string host = "127.0.0.1";     // loopback only; "0.0.0.0" accepts other machines
  int port = 8000;                  // 0: any free port (start() returns it)
  // One ONNX file (served as the model named after the file, version 1), or a
  // repository: <model>/<version>/model.onnx with an optional <model>/config.yaml.
  std::string model;
  std::string model_repository;
  // Where the models run ("cuda", "cuda:1"; a model's config.yaml may name
  // its own): inputs are staged through pinned host memory, and each model's
  // memory there is in /metrics (kiln_model_memory_bytes).
  std::string device = "cpu";
  size_t max_body_bytes = 64u << 20;  // larger bodies get 413
  // The largest batch (axis 0) one request may carry to a model without
  // max_batch_size in its config.yaml (those are bounded by it); more gets 413
  // before any data is decoded, so one request cannot take the machine's memory.
  int64_t max_request_batch = 256;
  int http_threads = 512;             // requests served at once (a worker thread each; idle connections take none)
  int max_connections_per_client = 256;  // from one address at once; more get 503
  // A request head must arrive within this (an idle keep-alive connection is
  // closed then too); a body within it plus its size at 64 KiB/s. Slower: 408.
  double header_timeout_s = 10;
  double request_timeout_s = 30;      // longer in the queue: 503
  double drain_timeout_s = 30;        // shutdown waits this long for in-flight requests
  std::string access_log = "-";       // "-": stderr; "": none; otherwise a file appended to
  // A file holding a token: every endpoint but /v2/health/* then needs
  // "Authorization: Bearer <token>" (401 otherwise). Empty: no authentication.
  std::string auth_token_file;
  // > 0: look at the model repository this often (seconds) and load what is
  // new or changed, unload what is gone. The repository endpoints
  // (/v2/repository/...) load and unload on request either way.
  double repository_poll_s = 0;
};

class Server {
 public:
  explicit Server(ServeOptions options);
  ~Server();
  // Starts listening (live at once), loads and warms up every model, then
  // turns ready. Returns the port. Throws when a model does not load.
  int start();
  // Not ready any more; waits for in-flight requests (up to drain_timeout_s); stops.
  void shutdown();
  bool ready() const;
  // Writes an access-log line with status 499 for every inference request
  // still being handled: for a process that ends before answering them.
  void log_unanswered();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Serves until SIGTERM or SIGINT, then shuts down gracefully. Returns the exit code.
int run_server(const ServeOptions& options);

}  // namespace kiln

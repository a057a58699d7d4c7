// `kiln serve --model model.onnx | --model-repository DIR [--port 8000]`.
#include <CLI/CLI.hpp>

#include "kiln/kiln.h"
#include "kiln/serve.h"

namespace kiln::cli {

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  auto* cmd = app.add_subcommand("serve", "Serve ONNX models over HTTP (Open Inference Protocol v2)");
  auto* model = cmd->add_option("--model", o->model, "One ONNX or MindIR file, served as the model named after the file");
  auto* repo = cmd->add_option("--model-repository", o->model_repository,
                               "A folder of <model>/<version>/model.onnx, each model with an optional config.yaml");
  model->excludes(repo);
  cmd->add_option("--device", o->device,
                  "Where the models run: cpu, or another backend of this build (cuda, cuda:1); a model's config.yaml "
                  "may name its own (device:)");
  cmd->add_option("--host", o->host, "Address to listen on (default 127.0.0.1: this machine only; 0.0.0.0: all)");
  cmd->add_option("--auth-token-file", o->auth_token_file,
                  "File holding a bearer token that every endpoint but /v2/health needs");
  cmd->add_option("--repository-poll-secs", o->repository_poll_s,
                  "Look at the model repository this often and load new or changed models, unload removed ones")
      ->check(CLI::PositiveNumber)
      ->needs(repo);
  cmd->add_option("--port", o->port, "Port to listen on (0: any free one)")->check(CLI::Range(0, 65535));
  cmd->add_option("--max-body-mb", o->max_body_bytes, "Largest request body, in MiB (default 64); larger ones get 413")
      ->transform([](std::string v) {
        double mb = 0;
        try {
          mb = std::stod(v);
        } catch (const std::exception&) {
          throw CLI::ValidationError("--max-body-mb", "'" + v + "' is not a number of MiB");
        }
        if (!(mb > 0)) throw CLI::ValidationError("--max-body-mb", "must be positive");
        return std::to_string(static_cast<size_t>(mb * 1024 * 1024));
      });
  cmd->add_option("--max-request-batch", o->max_request_batch,
                  "Largest batch one request may carry to a model without max_batch_size (default 256; more: 413)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--http-threads", o->http_threads, "Requests served at once, a worker thread each (default 512; idle connections take none)")
      ->check(CLI::Range(1, 16384));
  cmd->add_option("--max-connections-per-client", o->max_connections_per_client,
                  "Connections one address may hold at once (default 256; more are answered 503)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--header-timeout", o->header_timeout_s,
                  "Seconds a request head may take to arrive, and an idle connection stays open (default 10)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--request-timeout", o->request_timeout_s, "Seconds a request may wait for a batch slot (then 503)");
  cmd->add_option("--drain-timeout", o->drain_timeout_s, "Seconds shutdown waits for in-flight requests");
  cmd->add_option("--access-log", o->access_log, "Access log file ('-': stderr, '': none)");
  cmd->callback([o] {
    KILN_CHECK(!o->model.empty() || !o->model_repository.empty(), "kiln serve needs --model FILE or --model-repository DIR");
    int rc = run_server(*o);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace kiln::cli

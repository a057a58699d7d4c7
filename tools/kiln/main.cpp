// kiln: the command-line tool. Subcommands register here as they land.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <string>

#include "kiln/kiln.h"

namespace kiln::cli {
void add_ops_command(CLI::App& app);
void add_train_commands(CLI::App& app);
void add_ckpt_command(CLI::App& app);
void add_onnx_test_command(CLI::App& app);
void add_deploy_commands(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_launch_commands(CLI::App& app);
void add_studio_commands(CLI::App& app);
void add_job_commands(CLI::App& app);
}

int main(int argc, char** argv) {
  CLI::App app{"Kiln: train, export and serve deep learning models"};
  app.require_subcommand(1);
  kiln::cli::add_ops_command(app);
  kiln::cli::add_train_commands(app);
  kiln::cli::add_ckpt_command(app);
  kiln::cli::add_onnx_test_command(app);
  kiln::cli::add_deploy_commands(app);
  kiln::cli::add_serve_command(app);
  kiln::cli::add_launch_commands(app);
  kiln::cli::add_studio_commands(app);
  kiln::cli::add_job_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const kiln::Error& e) {
    // One write: another process sharing this stderr (a server being stopped)
    // cannot land in the middle of the line.
    std::string line = std::string("kiln: error: ") + e.what() + "\n";
    std::fwrite(line.data(), 1, line.size(), stderr);
    return 1;
  }
  return 0;
}

// kiln: the command-line tool. Subcommands register here as they land.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/op_library.h"

namespace kiln::cli {
void add_ops_command(CLI::App& app);
void add_train_commands(CLI::App& app);
void add_bench_train_command(CLI::App& app);
void add_ckpt_command(CLI::App& app);
void add_onnx_test_command(CLI::App& app);
void add_deploy_commands(CLI::App& app);
void add_quantize_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_launch_commands(CLI::App& app);
void add_studio_commands(CLI::App& app);
void add_job_commands(CLI::App& app);
void add_model_commands(CLI::App& app);
void add_service_commands(CLI::App& app);
void add_project_commands(CLI::App& app);
void add_notebook_commands(CLI::App& app);
}

namespace {

// A command whose library this build lacks: it exists, and says how to get it.
[[maybe_unused]] void add_missing_command(CLI::App& app, const std::string& name, const std::string& what,
                                          const std::string& option) {
  CLI::App* cmd = app.add_subcommand(name, what + " (not in this build: configure with -D" + option + "=ON)");
  cmd->fallthrough(false);  // whatever follows is the missing command's
  cmd->prefix_command();
  cmd->callback([name, option] {
    throw kiln::Error("'kiln " + name + "' is not in this build: configure Kiln with -D" + option +
                      "=ON (scripts/build.sh builds everything)");
  });
}

// Op packages load before any command runs: --plugin PATH (any number, before
// or after the command's name) and KILN_PLUGIN_PATH.
void load_plugins(int argc, char** argv) {
  kiln::load_op_libraries_from_environment();
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") break;
    if (arg == "--plugin" && i + 1 < argc) kiln::load_op_library(argv[++i]);
    else if (arg.rfind("--plugin=", 0) == 0) kiln::load_op_library(arg.substr(9));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Kiln: train, export and serve deep learning models"};
  app.require_subcommand(1);
  // Read by load_plugins; declared so that every command accepts it.
  std::vector<std::string> plugins;
  app.add_option("--plugin", plugins, "Load an op package (a shared library built with kiln_add_op_library) first");
  app.fallthrough();
  kiln::cli::add_ops_command(app);
  kiln::cli::add_train_commands(app);
  kiln::cli::add_bench_train_command(app);
  kiln::cli::add_ckpt_command(app);
  kiln::cli::add_onnx_test_command(app);
  kiln::cli::add_deploy_commands(app);
  kiln::cli::add_quantize_command(app);
  kiln::cli::add_generate_command(app);
#ifdef KILN_WITH_SERVE
  kiln::cli::add_serve_command(app);
#else
  add_missing_command(app, "serve", "Serve ONNX models over HTTP", "KILN_BUILD_SERVE");
#endif
#ifdef KILN_WITH_DIST
  kiln::cli::add_launch_commands(app);
#else
  add_missing_command(app, "launch", "Start the ranks of a distributed job", "KILN_BUILD_DIST");
  add_missing_command(app, "logs", "Read the per-rank logs of kiln launch", "KILN_BUILD_DIST");
#endif
#ifdef KILN_WITH_STUDIO
  kiln::cli::add_studio_commands(app);
  kiln::cli::add_job_commands(app);
  kiln::cli::add_model_commands(app);
  kiln::cli::add_service_commands(app);
  kiln::cli::add_project_commands(app);
  kiln::cli::add_notebook_commands(app);
#else
  for (const char* name : {"studio", "store", "job", "model", "service", "project", "notebook"})
    add_missing_command(app, name, std::string("Kiln Studio's ") + name + " commands", "KILN_BUILD_STUDIO");
#endif
  try {
    load_plugins(argc, argv);
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

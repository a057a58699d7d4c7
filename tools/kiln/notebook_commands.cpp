// `kiln notebook create | list | show | start | stop | delete | open`: Jupyter
// notebooks in a studio, their work kept in its store.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "kiln/error.h"
#include "kiln/studio.h"
#include "studio_client.h"

namespace kiln::cli {
namespace {

using json = nlohmann::json;

void print_notebook(const json& n) {
  const json& spec = n["spec"];
  std::printf("notebook %-16s %-9s project %-12s %d CPU cores, %s, idle stop after %d s\n",
              n["name"].get<std::string>().c_str(), n["state"].get<std::string>().c_str(),
              n["project"].get<std::string>().c_str(), spec["cpus"].get<int>(),
              spec["memory_mb"].get<int64_t>() > 0 ? (std::to_string(spec["memory_mb"].get<int64_t>()) + " MB").c_str()
                                                   : "no memory limit",
              spec["idle_timeout_s"].get<int>());
  if (!n["reason"].get<std::string>().empty()) std::printf("  %s\n", n["reason"].get<std::string>().c_str());
  std::printf("  saved to %s\n", n["saved_to"].get<std::string>().c_str());
}

}  // namespace

void add_notebook_commands(CLI::App& app) {
  auto* notebook = app.add_subcommand("notebook", "Jupyter notebooks in a studio, their work kept in its store");
  notebook->require_subcommand(1);
  struct Args {
    std::string server, token, name, project, spec = "cpu-2", idle = "1h";
  };
  auto a = std::make_shared<Args>();
  auto base = [](const std::string& name) { return "/api/v1/notebooks/" + encode(name, false); };
  auto* create = notebook->add_subcommand("create", "Start a new notebook on a spec (cpu-N: N cores, 4 GB each)");
  create->add_option("name", a->name, "Notebook name")->required();
  create->add_option("--spec", a->spec, "cpu-1, cpu-2 (default), cpu-4, ...");
  create->add_option("--project", a->project, "The project it belongs to (default: default)");
  create->add_option("--idle-timeout", a->idle, "Stop after this long idle: 1h (default), 30m, 90s");
  create->callback([a] {
    json body = {{"name", a->name}, {"spec", a->spec},
                 {"idle_timeout_s", std::max<int64_t>(1, studio::parse_duration_ms(a->idle) / 1000)}};
    if (!a->project.empty()) body["project"] = a->project;
    print_notebook(Remote(a->server, a->token).post_json("/api/v1/notebooks", body, 201));
  });
  auto* list = notebook->add_subcommand("list", "Notebooks with their specs and states");
  list->callback([a] {
    const json all = Remote(a->server, a->token).get_json("/api/v1/notebooks");
    if (all["notebooks"].empty()) std::printf("no notebooks (kiln notebook create NAME)\n");
    for (const auto& n : all["notebooks"]) print_notebook(n);
  });
  auto* show = notebook->add_subcommand("show", "A notebook's state and spec");
  show->add_option("name", a->name, "Notebook name")->required();
  show->callback([a, base] { print_notebook(Remote(a->server, a->token).get_json(base(a->name))); });
  auto* start = notebook->add_subcommand("start", "Start a stopped notebook, its work restored from the store");
  start->add_option("name", a->name, "Notebook name")->required();
  start->callback([a, base] { print_notebook(Remote(a->server, a->token).post_json(base(a->name) + "/start", json::object(), 202)); });
  auto* stop = notebook->add_subcommand("stop", "Stop a notebook, its work saved to the store");
  stop->add_option("name", a->name, "Notebook name")->required();
  stop->callback([a, base] { print_notebook(Remote(a->server, a->token).post_json(base(a->name) + "/stop", json::object(), 202)); });
  auto* remove = notebook->add_subcommand("delete", "Delete a stopped notebook (its saved work stays in the store)");
  remove->add_option("name", a->name, "Notebook name")->required();
  remove->callback([a, base] { Remote(a->server, a->token).send("DELETE", base(a->name), "", "", 204); });
  auto* open = notebook->add_subcommand("open", "Print the URL that opens the notebook in a browser with your token");
  open->add_option("name", a->name, "Notebook name")->required();
  open->callback([a, base] {
    Remote remote(a->server, a->token);
    remote.get_json(base(a->name));  // it is there, and the token may see it
    std::printf("%s%s/open?token=%s\n", remote.server().c_str(), base(a->name).c_str(), remote.token().c_str());
  });
  for (auto* sub : {create, list, show, start, stop, remove, open}) {
    sub->add_option("--server", a->server, "Studio URL (default: KILN_STUDIO_URL, or http://127.0.0.1:8080)");
    sub->add_option("--token", a->token, "API token (default: KILN_STUDIO_TOKEN)");
  }
}

}  // namespace kiln::cli

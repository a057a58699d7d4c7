// `kiln model register | list | show | alias | delete`: the studio's model registry.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "kiln/error.h"
#include "cli_args.h"
#include "studio_client.h"

namespace kiln::cli {
namespace {

using json = nlohmann::json;

std::string shape_text(const json& shape) {
  if (shape.is_null()) return "?";
  std::string s;
  for (const auto& d : shape) s += (s.empty() ? "" : ", ") + (d.is_string() ? d.get<std::string>() : d.dump());
  return "[" + s + "]";
}

void print_version(const json& v) {
  std::printf("%s version %lld  %s", v["model"].get<std::string>().c_str(), v["version"].get<long long>(),
              v["state"].get<std::string>().c_str());
  if (!v["aliases"].empty()) {
    std::string a;
    for (const auto& x : v["aliases"]) a += (a.empty() ? "" : ", ") + ("@" + x.get<std::string>());
    std::printf("  (%s)", a.c_str());
  }
  std::printf("\n");
  if (!v["reason"].get<std::string>().empty()) std::printf("  reason   %s\n", v["reason"].get<std::string>().c_str());
  std::printf("  source   %s\n", v["source"].get<std::string>().c_str());
  if (!v["description"].get<std::string>().empty())
    std::printf("  about    %s\n", v["description"].get<std::string>().c_str());
  if (v["signature"].is_object()) {
    for (const char* side : {"inputs", "outputs"})
      for (const auto& t : v["signature"][side])
        std::printf("  %-8s %s: %s %s\n", side == std::string("inputs") ? "input" : "output",
                    t["name"].get<std::string>().c_str(), t["dtype"].get<std::string>().c_str(),
                    shape_text(t["shape"]).c_str());
  }
  const json& lineage = v["lineage"];
  if (lineage.contains("job")) std::printf("  job      %lld\n", lineage["job"].get<long long>());
  if (lineage.contains("data"))
    for (auto& [k, url] : lineage["data"].items()) std::printf("  data     %s: %s\n", k.c_str(), url.get<std::string>().c_str());
  if (lineage.contains("metrics"))
    for (auto& [k, m] : lineage["metrics"].items())
      if (m.is_number()) std::printf("  metric   %s = %g\n", k.c_str(), m.get<double>());
  for (auto& [k, t] : v["tags"].items()) std::printf("  tag      %s = %s\n", k.c_str(), t.get<std::string>().c_str());
  std::printf("  uri      %s\n", v["uri"].get<std::string>().c_str());
}

// "fmnist", "fmnist@production", "fmnist/3", "models:/fmnist@production".
std::string resolve_path(const std::string& uri) { return "/api/v1/models/resolve?uri=" + encode(uri, false); }

}  // namespace

void add_model_commands(CLI::App& app) {
  auto* model = app.add_subcommand("model", "The studio's model registry: register, list, show, alias, delete");
  model->require_subcommand(1);
  auto server = std::make_shared<std::string>();
  auto token = std::make_shared<std::string>();
  struct Args {
    std::string name, file, url, shape, description, alias;
    int64_t job = 0, version = 0;
    std::vector<std::string> tags;
    bool wait = false, remove = false;
  };
  auto a = std::make_shared<Args>();

  auto* reg = model->add_subcommand("register", "Register a new version from a completed job, a store URL or a file");
  reg->add_option("name", a->name, "Model name")->required();
  reg->add_option("--job", a->job, "A completed job: its checkpoint is exported through its recipe");
  reg->add_option("--url", a->url, "An ONNX file in the store (studio://bucket/key)");
  reg->add_option("--file", a->file, "A local ONNX file, uploaded");
  reg->add_option("--input-shape", a->shape, "For --job: the sample shape to export with, e.g. 1,3,32,32");
  reg->add_option("--description", a->description, "What this version is");
  reg->add_option("--tag", a->tags, "KEY=VALUE, any number of times");
  reg->add_flag("--wait", a->wait, "Wait for the check; exit 0 only if the version is READY");
  auto project = std::make_shared<std::string>();
  reg->add_option("--project", *project, "A new model's project (default: default)");
  reg->callback([=] {
    Remote remote(*server, *token);
    const std::string path = "/api/v1/models/" + encode(a->name, false) + "/versions";
    const std::string in_project = project->empty() ? "" : "project=" + encode(*project, false);
    json v;
    if (!a->file.empty()) {
      std::ifstream f(a->file, std::ios::binary);
      KILN_CHECK(f, "cannot read ", a->file);
      std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      KILN_CHECK(a->tags.empty(), "--tag goes with --job or --url; tag an uploaded version afterwards (PATCH)");
      v = remote.send("POST", path + "?description=" + encode(a->description, false) +
                                  (in_project.empty() ? "" : "&" + in_project),
                      bytes, "application/octet-stream", 201);
    } else {
      json body = {{"description", a->description}, {"tags", json::object()}};
      if (a->job) body["job"] = a->job;
      if (!a->url.empty()) body["url"] = a->url;
      if (!a->shape.empty()) body["input_shape"] = parse_ints(a->shape, "--input-shape");
      for (const auto& t : a->tags) {
        size_t eq = t.find('=');
        KILN_CHECK(eq != std::string::npos && eq > 0, "--tag takes KEY=VALUE, not '", t, "'");
        body["tags"][t.substr(0, eq)] = t.substr(eq + 1);
      }
      if (!project->empty()) body["project"] = *project;
      v = remote.post_json(path, body, 201);
    }
    std::printf("%s version %lld: %s\n", a->name.c_str(), v["version"].get<long long>(),
                v["state"].get<std::string>().c_str());
    std::fflush(stdout);
    if (!a->wait) return;
    const std::string at = path + "/" + std::to_string(v["version"].get<int64_t>());
    while (v["state"] == "PENDING") {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      v = remote.get_json(at);
    }
    print_version(v);
    if (v["state"] != "READY") throw CLI::RuntimeError(1);
  });

  auto* list = model->add_subcommand("list", "Models with their version counts and aliases");
  list->callback([=] {
    json models = Remote(*server, *token).get_json("/api/v1/models")["models"];
    if (models.empty()) std::printf("no models yet (kiln model register)\n");
    for (const auto& m : models) {
      std::string aliases;
      for (auto& [alias, version] : m["aliases"].items())
        aliases += (aliases.empty() ? "" : ", ") + ("@" + alias + " -> " + version.dump());
      std::printf("%-24s %3lld versions  %s\n", m["name"].get<std::string>().c_str(), m["versions"].get<long long>(),
                  aliases.c_str());
    }
  });

  auto* show = model->add_subcommand("show", "A version: state, signature, lineage, tags (NAME, NAME@ALIAS, NAME/N)");
  show->add_option("model", a->name, "NAME (the latest READY version), NAME@ALIAS or NAME/VERSION")->required();
  show->callback([=] { print_version(Remote(*server, *token).get_json(resolve_path(a->name))); });

  auto* alias = model->add_subcommand("alias", "Point an alias at a version (or --delete it)");
  alias->add_option("name", a->name, "Model name")->required();
  alias->add_option("alias", a->alias, "Alias, e.g. production")->required();
  alias->add_option("version", a->version, "Version number");
  alias->add_flag("--delete", a->remove, "Remove the alias");
  alias->callback([=] {
    Remote remote(*server, *token);
    const std::string path = "/api/v1/models/" + encode(a->name, false) + "/aliases/" + encode(a->alias, false);
    if (a->remove) {
      remote.send("DELETE", path, "", "", 204);
      std::printf("removed %s@%s\n", a->name.c_str(), a->alias.c_str());
      return;
    }
    KILN_CHECK(a->version > 0, "give the version the alias points at: kiln model alias NAME ALIAS VERSION");
    remote.send("PUT", path, json({{"version", a->version}}).dump(), "application/json", 200);
    std::printf("%s@%s -> version %lld\n", a->name.c_str(), a->alias.c_str(), static_cast<long long>(a->version));
  });

  auto* remove = model->add_subcommand("delete", "Delete a version (NAME/VERSION) or a whole model (NAME)");
  remove->add_option("model", a->name, "NAME or NAME/VERSION")->required();
  remove->callback([=] {
    size_t slash = a->name.find('/');
    std::string path = slash == std::string::npos
                           ? "/api/v1/models/" + encode(a->name, false)
                           : "/api/v1/models/" + encode(a->name.substr(0, slash), false) + "/versions/" +
                                 encode(a->name.substr(slash + 1), false);
    Remote(*server, *token).send("DELETE", path, "", "", 204);
    std::printf("deleted %s\n", a->name.c_str());
  });

  for (auto* sub : {reg, list, show, alias, remove}) {
    sub->add_option("--server", *server, "Studio URL (default: KILN_STUDIO_URL, or http://127.0.0.1:8080)");
    sub->add_option("--token", *token, "API token (default: KILN_STUDIO_TOKEN)");
  }
}

}  // namespace kiln::cli

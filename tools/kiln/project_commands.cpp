// People and projects on the command line.
//   kiln studio user create | password        (the operator, on the studio's data directory)
//   kiln studio project create | grant
//   kiln studio login --user NAME             (a user's token, from the password)
//   kiln project list | show | grant | remove | quota | secret set | secret list | secret delete   (over the API)
#include <CLI/CLI.hpp>
#include <array>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <termios.h>
#include <unistd.h>

#include "kiln/error.h"
#include "kiln/studio.h"
#include "studio_client.h"

namespace kiln::cli {
namespace {

using json = nlohmann::json;

// A password from a file's first line, or from standard input (not echoed on a terminal).
std::string read_password(const std::string& file, const char* prompt) {
  std::string password;
  if (!file.empty()) {
    std::ifstream in(file);
    KILN_CHECK(in.good(), "cannot read the password file ", file);
    std::getline(in, password);
    return password;
  }
  const bool terminal = ::isatty(STDIN_FILENO);
  termios saved{};
  if (terminal) {
    std::fprintf(stderr, "%s", prompt);
    ::tcgetattr(STDIN_FILENO, &saved);
    termios quiet = saved;
    quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
    ::tcsetattr(STDIN_FILENO, TCSANOW, &quiet);
  }
  std::getline(std::cin, password);
  if (terminal) {
    ::tcsetattr(STDIN_FILENO, TCSANOW, &saved);
    std::fprintf(stderr, "\n");
  }
  return password;
}

void print_project(const json& p) {
  std::printf("project %s\n", p["name"].get<std::string>().c_str());
  const json& q = p["quota"];
  if (q["cpus"] > 0 || q["memory_mb"] > 0 || q["gpus"] > 0)
    std::printf("  quota: %lld CPU cores, %lld MB, %lld GPUs (0: no limit)\n", q["cpus"].get<long long>(),
                q["memory_mb"].get<long long>(), q["gpus"].get<long long>());
  for (const auto& m : p["members"])
    std::printf("  %-24s %s\n", m["user"].get<std::string>().c_str(), m["role"].get<std::string>().c_str());
}

void add_operator_commands(CLI::App& studio) {
  struct Args {
    std::string data = "studio-data", db, name, project, role, password_file, user, expires = "12h", server;
  };
  auto a = std::make_shared<Args>();
  auto local = [a](CLI::App* cmd) {
    cmd->add_option("--data", a->data, "The studio's data directory");
    cmd->add_option("--db", a->db, "The studio's database, when not DATA/studio.db")->envname("KILN_STUDIO_DB");
  };
  auto* user = studio.add_subcommand("user", "Create users, or set their passwords");
  user->require_subcommand(1);
  auto* create_user = user->add_subcommand("create", "Create a user; the password comes from stdin or --password-file");
  create_user->add_option("name", a->name, "The user's name")->required();
  create_user->add_option("--password-file", a->password_file, "A file whose first line is the password");
  local(create_user);
  create_user->callback([a] {
    studio::create_user(a->data, a->name, read_password(a->password_file, "password: "), a->db);
    std::printf("user %s created\n", a->name.c_str());
  });
  auto* password = user->add_subcommand("password", "Set a user's password (from stdin or --password-file)");
  password->add_option("name", a->name, "The user's name")->required();
  password->add_option("--password-file", a->password_file, "A file whose first line is the password");
  local(password);
  password->callback([a] {
    studio::set_user_password(a->data, a->name, read_password(a->password_file, "new password: "), a->db);
    std::printf("password of %s set\n", a->name.c_str());
  });

  auto* project = studio.add_subcommand("project", "Create projects and give users roles in them");
  project->require_subcommand(1);
  auto* create_project = project->add_subcommand("create", "Create a project");
  create_project->add_option("name", a->project, "The project's name")->required();
  local(create_project);
  create_project->callback([a] {
    studio::create_project(a->data, a->project, a->db);
    std::printf("project %s created\n", a->project.c_str());
  });
  auto* grant = project->add_subcommand("grant", "Give a user a role in a project: viewer, developer, admin (none removes)");
  grant->add_option("project", a->project, "The project")->required();
  grant->add_option("user", a->user, "The user")->required();
  grant->add_option("role", a->role, "viewer, developer, admin or none")->required();
  local(grant);
  grant->callback([a] {
    studio::set_project_role(a->data, a->project, a->user, a->role, a->db);
    std::printf("%s is %s in project %s\n", a->user.c_str(), a->role.c_str(), a->project.c_str());
  });

  auto* login = studio.add_subcommand("login", "Log in as a user: prints a token of the user's (password from stdin)");
  login->add_option("--user", a->user, "The user's name")->required();
  login->add_option("--expires", a->expires, "How long the token works: 12h (default), 30d, ...");
  login->add_option("--password-file", a->password_file, "A file whose first line is the password");
  login->add_option("--server", a->server, "Studio URL (default: KILN_STUDIO_URL, or http://127.0.0.1:8080)");
  login->callback([a] {
    const std::string password = read_password(a->password_file, "password: ");
    json reply = Remote(a->server, "", true).post_json("/api/v1/login",
                                                 {{"user", a->user}, {"password", password}, {"expires", a->expires}}, 200);
    std::printf("%s\n", reply["token"].get<std::string>().c_str());
  });
}

void add_project_api_commands(CLI::App& app) {
  auto* project = app.add_subcommand("project", "Your projects in a studio: members, roles and secrets");
  project->require_subcommand(1);
  struct Args {
    std::string server, token, name, user, role, secret, value_file;
  };
  auto a = std::make_shared<Args>();
  auto base = [](const std::string& name) { return "/api/v1/projects/" + encode(name, false); };
  auto* list = project->add_subcommand("list", "The projects you have a role in, with their members");
  list->callback([a] {
    const json all = Remote(a->server, a->token).get_json("/api/v1/projects");
    for (const auto& p : all["projects"]) print_project(p);
  });
  auto* show = project->add_subcommand("show", "A project's members and roles");
  show->add_option("name", a->name, "The project")->required();
  show->callback([a, base] { print_project(Remote(a->server, a->token).get_json(base(a->name))); });
  auto* grant = project->add_subcommand("grant", "Give a user a role in the project (you are its admin)");
  grant->add_option("name", a->name, "The project")->required();
  grant->add_option("user", a->user, "The user")->required();
  grant->add_option("role", a->role, "viewer, developer or admin")->required();
  grant->callback([a, base] {
    Remote(a->server, a->token).send("PUT", base(a->name) + "/members/" + encode(a->user, false),
                                     json({{"role", a->role}}).dump(), "application/json", 200);
    std::printf("%s is %s in project %s\n", a->user.c_str(), a->role.c_str(), a->name.c_str());
  });
  auto* remove = project->add_subcommand("remove", "Take a user out of the project");
  remove->add_option("name", a->name, "The project")->required();
  remove->add_option("user", a->user, "The user")->required();
  remove->callback([a, base] {
    Remote(a->server, a->token).send("DELETE", base(a->name) + "/members/" + encode(a->user, false), "", "", 204);
  });
  auto quota = std::make_shared<std::array<int64_t, 3>>();
  auto* set_quota = project->add_subcommand("quota", "Limit what the project's running jobs hold at once (a studio-wide "
                                                     "admin token; 0: no limit)");
  set_quota->add_option("name", a->name, "The project")->required();
  set_quota->add_option("--cpus", (*quota)[0], "CPU cores")->check(CLI::Range(0, 100000));
  set_quota->add_option("--memory-mb", (*quota)[1], "Memory in MB")->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  set_quota->add_option("--gpus", (*quota)[2], "GPUs")->check(CLI::Range(0, 10000));
  set_quota->callback([a, base, quota] {
    json reply = Remote(a->server, a->token).send(
        "PUT", base(a->name) + "/quota",
        json({{"cpus", (*quota)[0]}, {"memory_mb", (*quota)[1]}, {"gpus", (*quota)[2]}}).dump(), "application/json", 200);
    std::printf("project %s: %s\n", a->name.c_str(), reply["quota"].dump().c_str());
  });
  auto* secret = project->add_subcommand("secret", "The project's secrets, which its jobs name under secrets:");
  secret->require_subcommand(1);
  auto* set = secret->add_subcommand("set", "Set a secret; its value comes from stdin or --value-file");
  set->add_option("name", a->name, "The project")->required();
  set->add_option("secret", a->secret, "The secret's name (an environment variable's)")->required();
  set->add_option("--value-file", a->value_file, "A file holding the value");
  set->callback([a, base] {
    std::string value;
    if (!a->value_file.empty()) {
      std::ifstream in(a->value_file, std::ios::binary);
      KILN_CHECK(in.good(), "cannot read ", a->value_file);
      value.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    } else {
      std::getline(std::cin, value);
    }
    Remote(a->server, a->token).send("PUT", base(a->name) + "/secrets/" + encode(a->secret, false), value,
                                     "application/octet-stream", 200);
    std::printf("secret %s of project %s set\n", a->secret.c_str(), a->name.c_str());
  });
  auto* secrets = secret->add_subcommand("list", "The names of the project's secrets (never their values)");
  secrets->add_option("name", a->name, "The project")->required();
  secrets->callback([a, base] {
    const json names = Remote(a->server, a->token).get_json(base(a->name) + "/secrets");
    for (const auto& n : names["secrets"]) std::printf("%s\n", n.get<std::string>().c_str());
  });
  auto* unset = secret->add_subcommand("delete", "Delete a secret");
  unset->add_option("name", a->name, "The project")->required();
  unset->add_option("secret", a->secret, "The secret's name")->required();
  unset->callback([a, base] {
    Remote(a->server, a->token).send("DELETE", base(a->name) + "/secrets/" + encode(a->secret, false), "", "", 204);
  });
  for (auto* sub : {list, show, grant, remove, set_quota, set, secrets, unset}) {
    sub->add_option("--server", a->server, "Studio URL (default: KILN_STUDIO_URL, or http://127.0.0.1:8080)");
    sub->add_option("--token", a->token, "API token (default: KILN_STUDIO_TOKEN)");
  }
}

}  // namespace

void add_project_commands(CLI::App& app) {
  add_operator_commands(*app.get_subcommand("studio"));
  add_project_api_commands(app);
}

}  // namespace kiln::cli

#include "studio/projects.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "kiln/error.h"
#include "studio/models.h"
#include "studio/object_store.h"
#include "studio/tokens.h"

namespace kiln::studio {
namespace {

// OWASP's 2023 figure for PBKDF2-HMAC-SHA256: slow enough to make guessing
// costly, about 0.1 s per check here.
constexpr int kIterations = 600000;

std::string pbkdf2(const std::string& password, const std::string& salt, int iterations) {
  unsigned char key[32];
  KILN_CHECK(PKCS5_PBKDF2_HMAC(password.data(), static_cast<int>(password.size()),
                               reinterpret_cast<const unsigned char*>(salt.data()), static_cast<int>(salt.size()),
                               iterations, EVP_sha256(), sizeof key, key) == 1,
             "PBKDF2 failed (OpenSSL)");
  return hex(key, sizeof key);
}

// "pbkdf2-sha256$ITERATIONS$SALT$KEY", salt and key in hex.
std::string password_hash(const std::string& password) {
  KILN_CHECK(password.size() >= 8 && password.size() <= 1024,
             "a password needs 8 to 1024 characters, not ", password.size());
  unsigned char salt[16];
  KILN_CHECK(RAND_bytes(salt, sizeof salt) == 1, "no random bytes for a salt (OpenSSL RAND_bytes failed)");
  const std::string salt_hex = hex(salt, sizeof salt);
  return "pbkdf2-sha256$" + std::to_string(kIterations) + "$" + salt_hex + "$" + pbkdf2(password, salt_hex, kIterations);
}

void check_name(const std::string& name, const char* what) { check_model_name(name, what); }

}  // namespace

const char* role_name(Role role) {
  switch (role) {
    case Role::Viewer: return "viewer";
    case Role::Developer: return "developer";
    case Role::Admin: return "admin";
    default: return "none";
  }
}

Role parse_role(const std::string& name) {
  if (name == "viewer") return Role::Viewer;
  if (name == "developer") return Role::Developer;
  if (name == "admin") return Role::Admin;
  if (name == "none") return Role::None;
  KILN_FAIL("unknown role '", name, "'; the roles are viewer, developer and admin (none removes a member)");
}

Role role_for(Scope needed) {
  return needed == Scope::Read ? Role::Viewer : needed == Scope::Write ? Role::Developer : Role::Admin;
}

void create_user(Database& db, const std::string& name, const std::string& password) {
  check_name(name, "user name");
  KILN_CHECK(!user_exists(db, name), "user '", name, "' exists; set its password with `kiln studio user password`");
  Statement(db, "INSERT INTO users (name, password_hash, created_at) VALUES (?, ?, ?)")
      .bind(1, name).bind(2, password_hash(password)).bind(3, now_ms()).run();
}

void set_password(Database& db, const std::string& name, const std::string& password) {
  KILN_CHECK(Statement(db, "UPDATE users SET password_hash = ? WHERE name = ?").bind(1, password_hash(password))
                     .bind(2, name).run() == 1,
             "no user '", name, "'");
}

bool check_password(Database& db, const std::string& name, const std::string& password) {
  std::string stored;
  {
    Statement s(db, "SELECT password_hash FROM users WHERE name = ?");
    s.bind(1, name);
    if (s.step()) stored = s.text(0);
  }
  // An unknown user costs as much as a wrong password: the time tells nothing.
  std::vector<std::string> parts;
  std::istringstream fields(stored);
  for (std::string field; std::getline(fields, field, '$');) parts.push_back(field);
  const bool known = parts.size() == 4 && parts[0] == "pbkdf2-sha256";
  const int iterations = known ? std::stoi(parts[1]) : kIterations;
  const std::string key = pbkdf2(password, known ? parts[2] : std::string(32, '0'), iterations);
  return known && key.size() == parts[3].size() && CRYPTO_memcmp(key.data(), parts[3].data(), key.size()) == 0;
}

bool user_exists(Database& db, const std::string& name) {
  Statement s(db, "SELECT 1 FROM users WHERE name = ?");
  s.bind(1, name);
  return s.step();
}

void create_project(Database& db, const std::string& name) {
  check_name(name, "project name");
  KILN_CHECK(!project_exists(db, name), "project '", name, "' exists");
  Statement(db, "INSERT INTO projects (name, created_at) VALUES (?, ?)").bind(1, name).bind(2, now_ms()).run();
}

bool project_exists(Database& db, const std::string& name) {
  Statement s(db, "SELECT 1 FROM projects WHERE name = ?");
  s.bind(1, name);
  return s.step();
}

void set_member(Database& db, const std::string& project, const std::string& user, Role role) {
  KILN_CHECK(project_exists(db, project), "no project '", project, "' (`kiln studio project create ", project, "`)");
  KILN_CHECK(user_exists(db, user), "no user '", user, "' (`kiln studio user create ", user, "`)");
  if (role == Role::None) {
    Statement(db, "DELETE FROM project_members WHERE project = ? AND user_name = ?").bind(1, project).bind(2, user).run();
    return;
  }
  Statement(db, "INSERT INTO project_members (project, user_name, role) VALUES (?, ?, ?) "
                "ON CONFLICT (project, user_name) DO UPDATE SET role = excluded.role")
      .bind(1, project).bind(2, user).bind(3, std::string(role_name(role))).run();
}

Role role_of(Database& db, const std::string& user, const std::string& project) {
  Statement s(db, "SELECT role FROM project_members WHERE project = ? AND user_name = ?");
  s.bind(1, project).bind(2, user);
  return s.step() ? parse_role(s.text(0)) : Role::None;
}

namespace {

constexpr const char* kProjectColumns = "p.name, p.created_at, p.quota_cpus, p.quota_memory_mb, p.quota_gpus";

ProjectInfo project_of_row(const Statement& s) {
  ProjectInfo p{s.text(0), s.integer(1), {}, {}};
  p.quota = {static_cast<int>(s.integer(2)), s.integer(3), static_cast<int>(s.integer(4))};
  return p;
}

void add_members(Database& db, ProjectInfo& p) {
  Statement m(db, "SELECT user_name, role FROM project_members WHERE project = ? ORDER BY user_name");
  m.bind(1, p.name);
  while (m.step()) p.members.push_back({m.text(0), parse_role(m.text(1))});
}

}  // namespace

std::vector<ProjectInfo> list_projects(Database& db, const std::string& user) {
  std::vector<ProjectInfo> out;
  {
    Statement s(db, std::string("SELECT ") + kProjectColumns +
                        (user.empty() ? " FROM projects p ORDER BY p.name"
                                      : " FROM projects p JOIN project_members m ON m.project = p.name "
                                        "WHERE m.user_name = ? ORDER BY p.name"));
    if (!user.empty()) s.bind(1, user);
    while (s.step()) out.push_back(project_of_row(s));
  }
  for (auto& p : out) add_members(db, p);
  return out;
}

ProjectInfo project_info(Database& db, const std::string& name) {
  ProjectInfo p;
  {
    Statement s(db, std::string("SELECT ") + kProjectColumns + " FROM projects p WHERE p.name = ?");
    s.bind(1, name);
    if (!s.step()) throw NotFound("no project '" + name + "'");
    p = project_of_row(s);
  }
  add_members(db, p);
  return p;
}

std::string requested_project(const serve::HttpRequest& req) {
  std::string project = serve::query_param(req.query, "project").value_or("");
  const std::string* type = req.header("Content-Type");
  if (project.empty() && (!type || type->find("json") != std::string::npos) && !req.body.empty()) {
    const auto body = nlohmann::json::parse(req.body, nullptr, false);
    if (body.is_object() && body.contains("project") && body["project"].is_string()) project = body["project"];
  }
  if (project.empty()) return kDefaultProject;
  check_name(project, "project name");
  return project;
}

}  // namespace kiln::studio

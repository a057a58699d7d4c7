#pragma once
// People and projects: users (local accounts, passwords stored as salted
// PBKDF2-SHA256), projects that own buckets, jobs, models and services, and
// a role per user and project. A user's token acts with the user's role in
// the project of whatever it touches; a token with no user (an operator's,
// a job's own) is studio-wide and acts by its scope alone.
#include <optional>
#include <string>
#include <vector>

#include "kiln/studio.h"
#include "serve/http_server.h"
#include "studio/database.h"

namespace kiln::studio {

enum class Role { None, Viewer, Developer, Admin };
const char* role_name(Role role);
Role parse_role(const std::string& name);  // viewer, developer, admin; throws otherwise
// The role a token's scope asks of its user: read -> viewer, write -> developer, admin -> admin.
Role role_for(Scope needed);

// Every resource not given a project belongs to this one, which always exists.
constexpr const char* kDefaultProject = "default";

void create_user(Database& db, const std::string& name, const std::string& password);
void set_password(Database& db, const std::string& name, const std::string& password);
// Whether the password is the user's (false for an unknown user too).
bool check_password(Database& db, const std::string& name, const std::string& password);
bool user_exists(Database& db, const std::string& name);

void create_project(Database& db, const std::string& name);
bool project_exists(Database& db, const std::string& name);
// Role::None removes the user from the project.
void set_member(Database& db, const std::string& project, const std::string& user, Role role);
Role role_of(Database& db, const std::string& user, const std::string& project);

struct ProjectMember {
  std::string user;
  Role role = Role::None;
};
struct ProjectInfo {
  std::string name;
  int64_t created_ms = 0;
  std::vector<ProjectMember> members;
  struct {
    int cpus = 0;
    int64_t memory_mb = 0;
    int gpus = 0;
  } quota;  // what its running jobs may hold at once (0: no limit)
};
// Every project, or those `user` has a role in.
std::vector<ProjectInfo> list_projects(Database& db, const std::string& user = "");
// One project; NotFound when there is none.
ProjectInfo project_info(Database& db, const std::string& name);

// The project a request names for what it creates: "project" in a JSON
// body's object (jobs, services), else ?project= (buckets, models), else the
// default project. Checked to be a project's name.
std::string requested_project(const serve::HttpRequest& req);

}  // namespace kiln::studio

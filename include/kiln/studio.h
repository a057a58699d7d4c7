#pragma once
// Kiln Studio, the platform server: state in SQLite or PostgreSQL, API tokens with scopes
// and an audit log of every write, and an object store of buckets and keys.
//
//   kiln::studio::StudioOptions o;
//   o.data_dir = "studio-data";
//   kiln::studio::StudioServer studio(o);
//   int port = studio.start();
//
// REST under /api/v1 (docs/studio.md); every endpoint but /api/v1/health
// needs "Authorization: Bearer <token>" of a sufficient scope.
#include <memory>
#include <string>
#include <vector>

namespace kiln::studio {

enum class Scope { Read, Write, Admin };
const char* scope_name(Scope scope);
Scope parse_scope(const std::string& name);  // "read", "write", "admin"; throws otherwise

struct StudioOptions {
  std::string data_dir = "studio-data";  // the objects, job folders and (by default) the database live here
  // The database: empty for DATA_DIR/studio.db (SQLite), or a
  // postgresql://USER:PASSWORD@HOST:PORT/NAME URL.
  std::string database;
  std::string host = "127.0.0.1";
  int port = 8080;                        // 0: any free port
  size_t max_upload_bytes = size_t{1} << 30;  // one object's body; larger uploads get 413
  std::string access_log = "-";           // "-": stderr; "": none; otherwise a file appended to
  // The kiln executable that runs jobs (kiln launch, kiln train); empty: this process's own.
  std::string kiln_executable;
  // Where jobs run: "local" (processes of the studio) or "slurm" (sbatch;
  // the data directory must be visible at the same path on the nodes).
  std::string executor = "local";
  std::string slurm_partition;  // empty: the cluster's default
  // What the local executor runs jobs on at once: CPU cores and memory (0:
  // the machine's) and GPUs. A job waits in the queue until its resources
  // are free, and one asking for more than these is refused.
  int cpus = 0;
  int64_t memory_mb = 0;
  int gpus = 0;
  // The local executor's sandbox for each job (bubblewrap): "auto" where it
  // works on this machine, "bwrap" to refuse to start without it, "off".
  // Inside, a job writes its own folder and sees the rest of the machine
  // read-only, but nothing of the studio's data (other jobs, the store, the
  // database) nor other processes.
  std::string sandbox = "auto";
  // The web console's built files, served at "/" (empty: the ones this
  // build made, when they are there).
  std::string console_dir;
};

class StudioServer {
 public:
  // Opens (creating) the data directory and its database, migrating its schema.
  explicit StudioServer(StudioOptions options);
  ~StudioServer();
  int start();  // listens; returns the port
  void stop();
  const std::string& database() const;  // where the state is (a URL without its password)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Serves until SIGTERM or SIGINT. Returns the exit code.
int run_studio(const StudioOptions& options);

// SHA-256 of bytes as 64 hex digits: the checksum of objects and tokens, and
// what `kiln store` compares local files with.
std::string sha256_hex(const void* data, size_t size);
// The same computed piece by piece.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t size);
  std::string hex();  // once, at the end
 private:
  void* ctx_;
};
// Of a file, or of `length` bytes from `offset` (-1: to the end), read in
// pieces: files of any size.
std::string sha256_file(const std::string& path, int64_t offset = 0, int64_t length = -1);

// Creates an API token in the studio at data_dir (its database: as in
// StudioOptions); returns the secret, which is shown once and stored only as
// its SHA-256. expires_in_ms > 0: the studio refuses it after that long.
// With a user, the token acts for that user, with the user's role in each
// project (below); without, it is studio-wide and acts by its scope alone.
std::string create_token(const std::string& data_dir, const std::string& name, Scope scope,
                         const std::string& database = "", int64_t expires_in_ms = 0, const std::string& user = "");
// Revokes the tokens of that name; returns how many.
int revoke_tokens(const std::string& data_dir, const std::string& name, const std::string& database = "");
// A new token for that name (its scope), expiring after expires_in_ms (0:
// never); the name's live tokens keep working for grace_ms more (0: revoked
// at once). Throws when the name has no live token.
std::string rotate_token(const std::string& data_dir, const std::string& name, int64_t expires_in_ms, int64_t grace_ms,
                         const std::string& database = "");
// Every token ever made, without secrets.
struct TokenListing {
  std::string name;
  Scope scope = Scope::Read;
  int64_t created_ms = 0, expires_ms = 0, revoked_ms = 0;  // 0: never expires, not revoked
  std::string user;                                         // empty: studio-wide
  std::string state(int64_t now_ms) const;                  // "live", "expired" or "revoked"
};
std::vector<TokenListing> list_tokens(const std::string& data_dir, const std::string& database = "");

// People and projects (docs/studio.md, "Users and projects"): local users
// with passwords (8 characters or more, stored salted and stretched),
// projects that own buckets, jobs, models and services, and a role per user
// and project: viewer (reads), developer (writes), admin (also manages the
// project's members and secrets). Every studio has the project "default".
void create_user(const std::string& data_dir, const std::string& name, const std::string& password,
                 const std::string& database = "");
void set_user_password(const std::string& data_dir, const std::string& name, const std::string& password,
                       const std::string& database = "");
void create_project(const std::string& data_dir, const std::string& name, const std::string& database = "");
// role: viewer, developer, admin, or none (takes the user out of the project).
void set_project_role(const std::string& data_dir, const std::string& project, const std::string& user,
                      const std::string& role, const std::string& database = "");
// "90d", "12h", "30m", "45s" in milliseconds; "never" is 0. Throws on anything else.
int64_t parse_duration_ms(const std::string& text);
// Milliseconds since the epoch, and as "2026-12-05T01:02:03Z".
int64_t now_ms();
std::string utc_time(int64_t ms);

}  // namespace kiln::studio

#include "studio/database.h"

#include "kiln/error.h"

namespace kiln::studio {
namespace {

// Schema versions, oldest first: version i + 1 is reached by running
// kMigrations[i]. A release only appends, so any older file moves forward.
const char* const kMigrations[] = {
    // 1: tokens, the audit log, the object store's index.
    R"sql(
    CREATE TABLE tokens (
      id INTEGER PRIMARY KEY,
      name TEXT NOT NULL,
      hash TEXT NOT NULL UNIQUE,          -- SHA-256 of the secret, hex; the secret is never stored
      scope TEXT NOT NULL CHECK (scope IN ('read', 'write', 'admin')),
      created_at INTEGER NOT NULL,
      revoked_at INTEGER
    );
    CREATE TABLE audit_log (
      id INTEGER PRIMARY KEY,
      at INTEGER NOT NULL,                -- milliseconds since the epoch
      token_name TEXT NOT NULL,
      method TEXT NOT NULL,
      path TEXT NOT NULL,
      status INTEGER NOT NULL,
      remote TEXT NOT NULL
    );
    CREATE TABLE buckets (
      name TEXT PRIMARY KEY,
      created_at INTEGER NOT NULL
    );
    CREATE TABLE objects (
      bucket TEXT NOT NULL REFERENCES buckets(name),
      key TEXT NOT NULL,
      size INTEGER NOT NULL,
      sha256 TEXT NOT NULL,
      file TEXT NOT NULL,                 -- under the bucket's folder
      modified_at INTEGER NOT NULL,
      PRIMARY KEY (bucket, key)
    );
    )sql",
    // 2: training jobs.
    R"sql(
    CREATE TABLE jobs (
      id INTEGER PRIMARY KEY,
      spec TEXT NOT NULL,                 -- the validated spec, JSON
      state TEXT NOT NULL,
      stage TEXT NOT NULL,
      reason TEXT NOT NULL,
      submitted_by TEXT NOT NULL,
      exit_code INTEGER,
      created_at INTEGER NOT NULL,
      started_at INTEGER,
      ended_at INTEGER
    );
    )sql",
    // 3: run tracking (MLflow's semantics: parameters written once, metrics appended).
    R"sql(
    CREATE TABLE run_params (
      job_id INTEGER NOT NULL REFERENCES jobs(id),
      key TEXT NOT NULL,
      value TEXT NOT NULL,
      PRIMARY KEY (job_id, key)
    );
    CREATE TABLE run_metrics (
      job_id INTEGER NOT NULL REFERENCES jobs(id),
      key TEXT NOT NULL,
      step INTEGER NOT NULL,
      value REAL NOT NULL,
      at_ms INTEGER NOT NULL
    );
    CREATE INDEX run_metrics_by_key ON run_metrics (job_id, key, step);
    )sql",
    // 4: the model registry.
    R"sql(
    CREATE TABLE models (
      name TEXT PRIMARY KEY,
      description TEXT NOT NULL,
      created_at INTEGER NOT NULL
    );
    CREATE TABLE model_versions (
      model TEXT NOT NULL REFERENCES models(name),
      version INTEGER NOT NULL,
      state TEXT NOT NULL CHECK (state IN ('PENDING', 'READY', 'FAILED')),
      reason TEXT NOT NULL,
      source TEXT NOT NULL,               -- "job 12", "studio://bucket/key" or "upload"
      job_id INTEGER REFERENCES jobs(id),
      file_key TEXT NOT NULL,             -- the ONNX file in the studio-models bucket
      sha256 TEXT NOT NULL,
      size INTEGER NOT NULL,
      signature TEXT NOT NULL,            -- JSON: inputs and outputs read from the graph
      lineage TEXT NOT NULL,              -- JSON: job, data URLs, recipe, final metrics
      description TEXT NOT NULL,
      tags TEXT NOT NULL,                 -- JSON object
      created_by TEXT NOT NULL,
      created_at INTEGER NOT NULL,
      PRIMARY KEY (model, version)
    );
    CREATE TABLE model_aliases (
      model TEXT NOT NULL REFERENCES models(name),
      alias TEXT NOT NULL,
      version INTEGER NOT NULL,
      PRIMARY KEY (model, alias)
    );
    )sql",
    // 5: online services (their instances are processes, started again with the studio).
    R"sql(
    CREATE TABLE services (
      name TEXT PRIMARY KEY,
      spec TEXT NOT NULL,                 -- JSON: the versions with their models, weights and sizes
      state TEXT NOT NULL,
      reason TEXT NOT NULL,
      created_at INTEGER NOT NULL
    );
    )sql",
    // 6: uploads in parts (objects larger than one request, resumable).
    R"sql(
    CREATE TABLE uploads (
      id TEXT PRIMARY KEY,
      bucket TEXT NOT NULL REFERENCES buckets(name),
      key TEXT NOT NULL,
      created_at INTEGER NOT NULL
    );
    )sql",
    // 7: tags on runs (MLflow's: set, changed and removed at any time).
    R"sql(
    CREATE TABLE run_tags (
      job_id INTEGER NOT NULL REFERENCES jobs(id),
      key TEXT NOT NULL,
      value TEXT NOT NULL,
      PRIMARY KEY (job_id, key)
    );
    )sql",
    // 8: the executor a job ran on, and its id there (a Slurm job id).
    R"sql(
    ALTER TABLE jobs ADD COLUMN executor TEXT NOT NULL DEFAULT 'local';
    ALTER TABLE jobs ADD COLUMN external_id TEXT;
    )sql",
    // 9: when a job entered each of its stages (JSON: stage -> milliseconds since the epoch).
    R"sql(
    ALTER TABLE jobs ADD COLUMN stages TEXT NOT NULL DEFAULT '{}';
    )sql",
    // 10: a job's environment values (secrets, often) apart from its spec,
    // which keeps the names only: no answer, list or export carries them.
    R"sql(
    CREATE TABLE job_env (
      job_id INTEGER NOT NULL REFERENCES jobs(id),
      name TEXT NOT NULL,
      value TEXT NOT NULL,
      PRIMARY KEY (job_id, name)
    );
    )sql",
    // 11: tokens that expire (NULL: never).
    R"sql(
    ALTER TABLE tokens ADD COLUMN expires_at INTEGER;
    )sql",
    // 12: users, projects and roles; what each resource belongs to; tokens
    // and audit entries that name their user (NULL: a studio-wide token).
    R"sql(
    CREATE TABLE users (
      name TEXT PRIMARY KEY,
      password_hash TEXT NOT NULL,        -- pbkdf2-sha256$iterations$salt$key
      created_at INTEGER NOT NULL
    );
    CREATE TABLE projects (
      name TEXT PRIMARY KEY,
      created_at INTEGER NOT NULL
    );
    INSERT INTO projects (name, created_at) VALUES ('default', 0);
    CREATE TABLE project_members (
      project TEXT NOT NULL REFERENCES projects(name),
      user_name TEXT NOT NULL REFERENCES users(name),
      role TEXT NOT NULL CHECK (role IN ('viewer', 'developer', 'admin')),
      PRIMARY KEY (project, user_name)
    );
    CREATE TABLE project_secrets (
      project TEXT NOT NULL REFERENCES projects(name),
      name TEXT NOT NULL,
      value TEXT NOT NULL,
      PRIMARY KEY (project, name)
    );
    ALTER TABLE tokens ADD COLUMN user_name TEXT;
    ALTER TABLE audit_log ADD COLUMN user_name TEXT;
    ALTER TABLE buckets ADD COLUMN project TEXT NOT NULL DEFAULT 'default';
    ALTER TABLE jobs ADD COLUMN project TEXT NOT NULL DEFAULT 'default';
    ALTER TABLE models ADD COLUMN project TEXT NOT NULL DEFAULT 'default';
    ALTER TABLE services ADD COLUMN project TEXT NOT NULL DEFAULT 'default';
    )sql",
    // 13: what a project's running jobs may hold at once (0: no limit).
    R"sql(
    ALTER TABLE projects ADD COLUMN quota_cpus INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE projects ADD COLUMN quota_memory_mb INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE projects ADD COLUMN quota_gpus INTEGER NOT NULL DEFAULT 0;
    )sql",
    // 14: notebooks (Jupyter servers whose working folder lives in the store).
    R"sql(
    CREATE TABLE notebooks (
      name TEXT PRIMARY KEY,
      project TEXT NOT NULL REFERENCES projects(name),
      owner TEXT NOT NULL,                -- the user (or the token's name) that made it
      spec TEXT NOT NULL,                 -- JSON: cpus, memory_mb, idle_timeout_s, save_every_s
      state TEXT NOT NULL,
      reason TEXT NOT NULL,
      created_at INTEGER NOT NULL
    );
    )sql",
};
constexpr int kVersion = sizeof(kMigrations) / sizeof(kMigrations[0]);

}  // namespace

std::unique_ptr<Database> Database::open(const std::string& location) {
  const bool postgres = location.rfind("postgresql://", 0) == 0 || location.rfind("postgres://", 0) == 0;
  std::unique_ptr<Database> db = postgres ? open_postgres(location) : open_sqlite(location);
  db->migrate();
  return db;
}

void Database::migrate() {
  Transaction t(*this);
  int version = schema_version();
  KILN_CHECK(version <= kVersion, "the studio database ", location_, " has schema version ", version,
             ", newer than this kiln knows (", kVersion, "); run the kiln that wrote it, or a newer one");
  for (int v = version; v < kVersion; ++v) exec(dialect(kMigrations[v]));
  set_schema_version(kVersion);
  t.commit();
}

Statement::Statement(Database& db, const std::string& sql) : lock_(db.lock()), backend_(db.prepare(sql)) {}

Statement::~Statement() = default;

Statement& Statement::bind(int index, const std::string& value) {
  backend_->bind(index, value);
  return *this;
}

Statement& Statement::bind(int index, int64_t value) {
  backend_->bind(index, value);
  return *this;
}

Statement& Statement::bind(int index, double value) {
  backend_->bind(index, value);
  return *this;
}

Statement& Statement::bind_null(int index) {
  backend_->bind_null(index);
  return *this;
}

bool Statement::step() { return backend_->step(); }

int64_t Statement::run() {
  while (step()) {
  }
  return backend_->changes();  // under the lock: this statement's changes
}

std::string Statement::text(int column) const { return backend_->text(column); }
int64_t Statement::integer(int column) const { return backend_->integer(column); }
double Statement::real(int column) const { return backend_->real(column); }
bool Statement::is_null(int column) const { return backend_->is_null(column); }

Transaction::Transaction(Database& db) : db_(db), lock_(db.lock()) { db_.exec(db_.begin_sql()); }

Transaction::~Transaction() {
  if (done_) return;
  try {
    db_.exec("ROLLBACK");
  } catch (...) {  // the connection is gone: the server rolls back by itself
  }
}

void Transaction::commit() {
  db_.exec("COMMIT");
  done_ = true;
}

}  // namespace kiln::studio

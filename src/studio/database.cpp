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
};
constexpr int kVersion = sizeof(kMigrations) / sizeof(kMigrations[0]);

}  // namespace

Statement::Statement(Database& db, const std::string& sql) : db_(db), lock_(db.lock()) {
  if (sqlite3_prepare_v2(db.handle(), sql.c_str(), static_cast<int>(sql.size()), &stmt_, nullptr) != SQLITE_OK)
    db.fail("preparing '" + sql + "'");
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement& Statement::bind(int index, const std::string& value) {
  if (sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT) != SQLITE_OK)
    db_.fail("binding a value");
  return *this;
}

Statement& Statement::bind(int index, int64_t value) {
  if (sqlite3_bind_int64(stmt_, index, value) != SQLITE_OK) db_.fail("binding a value");
  return *this;
}

Statement& Statement::bind(int index, double value) {
  if (sqlite3_bind_double(stmt_, index, value) != SQLITE_OK) db_.fail("binding a value");
  return *this;
}

Statement& Statement::bind_null(int index) {
  if (sqlite3_bind_null(stmt_, index) != SQLITE_OK) db_.fail("binding a value");
  return *this;
}

int64_t Statement::run() {
  while (step()) {
  }
  return sqlite3_changes64(db_.handle());  // under the lock: this statement's changes
}

bool Statement::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  db_.fail("running a statement");
}

std::string Statement::text(int column) const {
  const unsigned char* p = sqlite3_column_text(stmt_, column);
  return p ? std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(stmt_, column)))
           : std::string();
}

int64_t Statement::integer(int column) const { return sqlite3_column_int64(stmt_, column); }
double Statement::real(int column) const { return sqlite3_column_double(stmt_, column); }
bool Statement::is_null(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }

Database::Database(const std::string& path) : path_(path) {
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr) !=
      SQLITE_OK) {
    std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    KILN_FAIL("cannot open the studio database ", path, ": ", why,
              "; check that the data directory exists and is writable (--data)");
  }
  // Several connection threads write: wait for the lock rather than fail.
  sqlite3_busy_timeout(db_, 10000);
  exec("PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;");
  migrate();
}

Database::~Database() { sqlite3_close(db_); }

void Database::exec(const std::string& sql) {
  char* error = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    std::string why = error ? error : "unknown error";
    sqlite3_free(error);
    KILN_FAIL("studio database ", path_, ": ", why);
  }
}

int Database::schema_version() {
  Statement s(*this, "PRAGMA user_version");
  s.step();
  return static_cast<int>(s.integer(0));
}

void Database::fail(const std::string& what) const {
  KILN_FAIL("studio database ", path_, ": ", what, ": ", sqlite3_errmsg(db_));
}

void Database::migrate() {
  Transaction t(*this);
  int version = schema_version();
  KILN_CHECK(version <= kVersion, "the studio database ", path_, " has schema version ", version,
             ", newer than this kiln knows (", kVersion, "); run the kiln that wrote it, or a newer one");
  for (int v = version; v < kVersion; ++v) exec(kMigrations[v]);
  exec("PRAGMA user_version = " + std::to_string(kVersion));
  t.commit();
}

Transaction::Transaction(Database& db) : db_(db), lock_(db.lock()) { db_.exec("BEGIN IMMEDIATE"); }

Transaction::~Transaction() {
  if (!done_) sqlite3_exec(db_.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
}

void Transaction::commit() {
  db_.exec("COMMIT");
  done_ = true;
}

}  // namespace kiln::studio

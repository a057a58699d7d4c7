// The studio's state in SQLite: one file, WAL mode, the schema version in
// PRAGMA user_version.
#include <sqlite3.h>

#include "kiln/error.h"
#include "studio/database.h"

namespace kiln::studio {
namespace {

class SqliteStatement final : public StatementBackend {
 public:
  SqliteStatement(sqlite3* db, const std::string& path, const std::string& sql) : db_(db), path_(path) {
    if (sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()), &stmt_, nullptr) != SQLITE_OK)
      fail("preparing '" + sql + "'");
  }
  ~SqliteStatement() override { sqlite3_finalize(stmt_); }

  void bind(int index, const std::string& value) override {
    check(sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT));
  }
  void bind(int index, int64_t value) override { check(sqlite3_bind_int64(stmt_, index, value)); }
  void bind(int index, double value) override { check(sqlite3_bind_double(stmt_, index, value)); }
  void bind_null(int index) override { check(sqlite3_bind_null(stmt_, index)); }

  bool step() override {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    fail("running a statement");
  }
  int64_t changes() override { return sqlite3_changes64(db_); }

  std::string text(int column) const override {
    const unsigned char* p = sqlite3_column_text(stmt_, column);
    return p ? std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(stmt_, column)))
             : std::string();
  }
  int64_t integer(int column) const override { return sqlite3_column_int64(stmt_, column); }
  double real(int column) const override { return sqlite3_column_double(stmt_, column); }
  bool is_null(int column) const override { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }

 private:
  void check(int rc) const {
    if (rc != SQLITE_OK) fail("binding a value");
  }
  [[noreturn]] void fail(const std::string& what) const {
    KILN_FAIL("studio database ", path_, ": ", what, ": ", sqlite3_errmsg(db_));
  }
  sqlite3* db_;
  const std::string& path_;
  sqlite3_stmt* stmt_ = nullptr;
};

class SqliteDatabase final : public Database {
 public:
  explicit SqliteDatabase(const std::string& path) : Database(path) {
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                        nullptr) != SQLITE_OK) {
      std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
      sqlite3_close(db_);
      db_ = nullptr;
      KILN_FAIL("cannot open the studio database ", path, ": ", why,
                "; check that the data directory exists and is writable (--data)");
    }
    // Several connection threads write: wait for the lock rather than fail.
    sqlite3_busy_timeout(db_, 10000);
    exec("PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;");
  }
  ~SqliteDatabase() override { sqlite3_close(db_); }

  void exec(const std::string& sql) override {
    char* error = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
      std::string why = error ? error : "unknown error";
      sqlite3_free(error);
      KILN_FAIL("studio database ", location(), ": ", why);
    }
  }
  std::unique_ptr<StatementBackend> prepare(const std::string& sql) override {
    return std::make_unique<SqliteStatement>(db_, location(), sql);
  }
  const char* begin_sql() const override { return "BEGIN IMMEDIATE"; }
  std::string bytes_of(const std::string& expression) const override {
    return "CAST(" + expression + " AS BLOB)";
  }
  std::string bytewise(const std::string& expression) const override { return expression; }  // BINARY collation
  const char* insertion_order() const override { return "rowid"; }

 protected:
  int schema_version() override {
    Statement s(*this, "PRAGMA user_version");
    s.step();
    return static_cast<int>(s.integer(0));
  }
  void set_schema_version(int version) override { exec("PRAGMA user_version = " + std::to_string(version)); }
  std::string dialect(const std::string& sql) const override { return sql; }

 private:
  sqlite3* db_ = nullptr;
};

}  // namespace

std::unique_ptr<Database> open_sqlite(const std::string& path) { return std::make_unique<SqliteDatabase>(path); }

}  // namespace kiln::studio

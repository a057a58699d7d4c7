#pragma once
// The studio's state in SQLite: one file in the data directory, opened in WAL
// mode, its schema versioned and migrated forward when the studio starts.
#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace kiln::studio {

class Database;

// A prepared statement: bind by position (from 1), step through rows, read
// columns by index (from 0). Reset and reused by the caller if it likes.
// It holds the database's lock for its lifetime (see Database::lock), so keep
// it short.
class Statement {
 public:
  Statement(Database& db, const std::string& sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  Statement& bind(int index, const std::string& value);
  Statement& bind(int index, int64_t value);
  Statement& bind(int index, double value);
  Statement& bind_null(int index);
  // true while there is a row to read; false when done. Throws on errors.
  bool step();
  // Runs it to the end; returns the rows it changed.
  int64_t run();
  std::string text(int column) const;
  int64_t integer(int column) const;
  double real(int column) const;
  bool is_null(int column) const;

 private:
  Database& db_;
  std::unique_lock<std::recursive_mutex> lock_;
  sqlite3_stmt* stmt_ = nullptr;
};

class Database {
 public:
  // Opens (creating) the file and brings its schema to the current version.
  explicit Database(const std::string& path);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  void exec(const std::string& sql);
  int schema_version();
  sqlite3* handle() { return db_; }
  const std::string& path() const { return path_; }
  [[noreturn]] void fail(const std::string& what) const;
  // One connection serves every thread of the studio. A transaction is the
  // connection's, not the thread's: so that no other thread's statement
  // runs inside it (or collides with its BEGIN), a transaction holds this
  // lock from BEGIN to COMMIT, and every statement while it lives.
  std::recursive_mutex& lock() { return lock_; }

 private:
  void migrate();
  sqlite3* db_ = nullptr;
  std::string path_;
  std::recursive_mutex lock_;
};

// Runs a transaction: BEGIN IMMEDIATE, then COMMIT, or ROLLBACK on an exception.
class Transaction {
 public:
  explicit Transaction(Database& db);
  ~Transaction();
  void commit();

 private:
  Database& db_;
  std::unique_lock<std::recursive_mutex> lock_;
  bool done_ = false;
};

}  // namespace kiln::studio

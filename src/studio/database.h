#pragma once
// The studio's state: SQLite by default (one file in the data directory, WAL
// mode), PostgreSQL when the studio is given a postgresql:// URL. The schema
// is versioned and migrated forward when the studio starts; the code above
// writes one SQL for both (positional `?` parameters, ON CONFLICT, RETURNING)
// and asks the database for the few expressions that differ.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace kiln::studio {

class Database;

// One prepared statement of an engine. Parameters are bound by position
// (from 1), columns read by index (from 0).
class StatementBackend {
 public:
  virtual ~StatementBackend() = default;
  virtual void bind(int index, const std::string& value) = 0;
  virtual void bind(int index, int64_t value) = 0;
  virtual void bind(int index, double value) = 0;
  virtual void bind_null(int index) = 0;
  virtual bool step() = 0;
  virtual int64_t changes() = 0;  // rows the statement changed, once it has run
  virtual std::string text(int column) const = 0;
  virtual int64_t integer(int column) const = 0;
  virtual double real(int column) const = 0;
  virtual bool is_null(int column) const = 0;
};

// A prepared statement: bind by position (from 1), step through rows, read
// columns by index (from 0).
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
  std::unique_lock<std::recursive_mutex> lock_;
  std::unique_ptr<StatementBackend> backend_;
};

class Database {
 public:
  // A postgresql:// (or postgres://) URL connects to that server; anything
  // else is the path of a SQLite file, created if missing. Either way the
  // schema is brought to the current version.
  static std::unique_ptr<Database> open(const std::string& location);
  virtual ~Database() = default;
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // Runs SQL without parameters or results (several statements allowed).
  virtual void exec(const std::string& sql) = 0;
  virtual std::unique_ptr<StatementBackend> prepare(const std::string& sql) = 0;
  // The statement that opens a transaction holding the write lock.
  virtual const char* begin_sql() const = 0;
  // The bytes of a text expression, to compare and order keys bytewise.
  virtual std::string bytes_of(const std::string& expression) const = 0;
  // A text expression that compares and orders bytewise.
  virtual std::string bytewise(const std::string& expression) const = 0;
  // An expression that orders a table's rows as they were inserted.
  virtual const char* insertion_order() const = 0;
  // Claims the database for one studio process while this connection lives
  // (false: another studio has it). A SQLite file is claimed with its data
  // directory instead.
  virtual bool claim() { return true; }
  // Where the database is, for messages (a URL's password is left out).
  const std::string& location() const { return location_; }
  // One connection serves every thread of the studio. A transaction is the
  // connection's, not the thread's: so that no other thread's statement
  // runs inside it (or collides with its BEGIN), a transaction holds this
  // lock from BEGIN to COMMIT, and every statement while it lives.
  std::recursive_mutex& lock() { return lock_; }

 protected:
  explicit Database(std::string location) : location_(std::move(location)) {}
  // Brings the schema to the current version, in one transaction.
  void migrate();
  virtual int schema_version() = 0;
  virtual void set_schema_version(int version) = 0;
  // A migration as this engine writes it (the migrations are SQLite's SQL).
  virtual std::string dialect(const std::string& sql) const = 0;

 private:
  std::string location_;
  std::recursive_mutex lock_;
};

std::unique_ptr<Database> open_sqlite(const std::string& path);
std::unique_ptr<Database> open_postgres(const std::string& url);

// Runs a transaction: BEGIN (holding the write lock), then COMMIT, or ROLLBACK
// on an exception.
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

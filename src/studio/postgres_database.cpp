// The studio's state in PostgreSQL, through libpq: for a team whose studio
// outgrows one file, or whose database is already run and backed up.
#include <libpq-fe.h>

#include <cstdlib>
#include <optional>
#include <regex>
#include <vector>

#include "kiln/error.h"
#include "studio/database.h"

namespace kiln::studio {
namespace {

// The URL without its password, for messages and logs.
std::string without_password(const std::string& url) {
  static const std::regex password(R"(^(postgres(?:ql)?://[^:@/]*):[^@/]*@)");
  return std::regex_replace(url, password, "$1:***@");
}

// libpq's message on one line.
std::string one_line(std::string why) {
  for (char& c : why)
    if (c == '\n' || c == '\t') c = ' ';
  while (!why.empty() && why.back() == ' ') why.pop_back();
  return why;
}

// SQLite's positional `?` as PostgreSQL's `$1, $2, ...`, outside quotes.
std::string numbered_parameters(const std::string& sql) {
  std::string out;
  out.reserve(sql.size() + 16);
  char quote = 0;
  int n = 0;
  for (char c : sql) {
    if (quote) {
      if (c == quote) quote = 0;  // a doubled quote closes and opens again: same result
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '?') {
      out += "$" + std::to_string(++n);
      continue;
    }
    out += c;
  }
  return out;
}

class Result {
 public:
  explicit Result(PGresult* r = nullptr) : r_(r) {}
  ~Result() { PQclear(r_); }
  Result(const Result&) = delete;
  Result& operator=(const Result&) = delete;
  Result(Result&& other) noexcept : r_(other.r_) { other.r_ = nullptr; }
  Result& operator=(Result&& other) noexcept {
    std::swap(r_, other.r_);
    return *this;
  }
  PGresult* get() const { return r_; }

 private:
  PGresult* r_;
};

class PostgresDatabase;

class PostgresStatement final : public StatementBackend {
 public:
  PostgresStatement(PostgresDatabase& db, std::string sql) : db_(db), sql_(std::move(sql)) {}

  void bind(int index, const std::string& value) override { slot(index) = value; }
  void bind(int index, int64_t value) override { slot(index) = std::to_string(value); }
  void bind(int index, double value) override {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.17g", value);
    slot(index) = buf;
  }
  void bind_null(int index) override { slot(index).reset(); }

  bool step() override;
  int64_t changes() override {
    const char* n = result_.get() ? PQcmdTuples(result_.get()) : "";
    return *n ? std::strtoll(n, nullptr, 10) : 0;
  }
  std::string text(int column) const override {
    return std::string(PQgetvalue(result_.get(), row_, column),
                       static_cast<size_t>(PQgetlength(result_.get(), row_, column)));
  }
  int64_t integer(int column) const override {
    const char* v = PQgetvalue(result_.get(), row_, column);
    if (v[0] == 't' && v[1] == 0) return 1;  // booleans come as t and f
    if (v[0] == 'f' && v[1] == 0) return 0;
    return std::strtoll(v, nullptr, 10);
  }
  double real(int column) const override { return std::strtod(PQgetvalue(result_.get(), row_, column), nullptr); }
  bool is_null(int column) const override { return PQgetisnull(result_.get(), row_, column) != 0; }

 private:
  std::optional<std::string>& slot(int index) {
    KILN_CHECK(index >= 1 && index <= 100, "studio database: parameter index ", index, " out of range");
    if (params_.size() < static_cast<size_t>(index)) params_.resize(static_cast<size_t>(index));
    return params_[static_cast<size_t>(index) - 1];
  }
  PostgresDatabase& db_;
  std::string sql_;
  std::vector<std::optional<std::string>> params_;
  Result result_;
  bool ran_ = false;
  int row_ = -1;
};

class PostgresDatabase final : public Database {
 public:
  explicit PostgresDatabase(const std::string& url) : Database(without_password(url)) {
    conn_ = PQconnectdb(url.c_str());
    if (PQstatus(conn_) != CONNECTION_OK) {
      std::string why = one_line(PQerrorMessage(conn_));
      PQfinish(conn_);
      conn_ = nullptr;
      KILN_FAIL("cannot connect to the studio database ", location(), ": ", why,
                "; check that the server runs, that the URL names a database that exists "
                "(createdb NAME) and that the user may log in (postgresql://USER:PASSWORD@HOST:PORT/NAME)");
    }
    // Notices (such as 'relation already exists, skipping') are not for the console.
    PQsetNoticeProcessor(conn_, [](void*, const char*) {}, nullptr);
  }
  ~PostgresDatabase() override { PQfinish(conn_); }

  void exec(const std::string& sql) override {
    Result r = retried([&] { return PQexec(conn_, sql.c_str()); });
    check(r.get(), sql);
    if (sql.rfind("BEGIN", 0) == 0) in_transaction_ = true;
    if (sql == "COMMIT" || sql == "ROLLBACK") in_transaction_ = false;
  }
  std::unique_ptr<StatementBackend> prepare(const std::string& sql) override {
    return std::make_unique<PostgresStatement>(*this, numbered_parameters(sql));
  }
  const char* begin_sql() const override { return "BEGIN"; }
  bool claim() override {
    Result r = run("SELECT pg_try_advisory_lock(7307112)", {});
    claimed_ = PQgetvalue(r.get(), 0, 0)[0] == 't';
    return claimed_;
  }
  std::string bytes_of(const std::string& expression) const override {
    return "convert_to(" + expression + ", 'UTF8')";
  }
  std::string bytewise(const std::string& expression) const override { return expression + " COLLATE \"C\""; }
  // run_metrics, the one table ordered this way, is only ever appended to.
  const char* insertion_order() const override { return "ctid"; }

  Result run(const std::string& sql, const std::vector<std::optional<std::string>>& params) {
    std::vector<const char*> values;
    values.reserve(params.size());
    for (const auto& p : params) values.push_back(p ? p->c_str() : nullptr);
    // Untyped parameters: the server infers each from where it stands.
    Result r = retried([&] {
      return PQexecParams(conn_, sql.c_str(), static_cast<int>(values.size()), nullptr, values.data(), nullptr,
                          nullptr, 0);
    });
    check(r.get(), sql);
    return r;
  }

 protected:
  int schema_version() override {
    // One studio migrates at a time; the lock ends with the transaction.
    exec("SELECT pg_advisory_xact_lock(7307111); CREATE TABLE IF NOT EXISTS kiln_schema (version INTEGER NOT NULL)");
    Result r = run("SELECT MAX(version) FROM kiln_schema", {});
    return PQgetisnull(r.get(), 0, 0) ? 0 : std::atoi(PQgetvalue(r.get(), 0, 0));
  }
  void set_schema_version(int version) override {
    exec("DELETE FROM kiln_schema; INSERT INTO kiln_schema (version) VALUES (" + std::to_string(version) + ")");
  }
  // SQLite's INTEGER is 64 bits and an INTEGER PRIMARY KEY numbers its rows.
  std::string dialect(const std::string& sql) const override {
    static const std::regex key(R"(\bINTEGER PRIMARY KEY\b)"), integer(R"(\bINTEGER\b)"), real(R"(\bREAL\b)");
    std::string out = std::regex_replace(sql, key, "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY");
    out = std::regex_replace(out, integer, "BIGINT");
    return std::regex_replace(out, real, "DOUBLE PRECISION");
  }

 private:
  // Runs a command; one that finds the connection gone (a server restart, an
  // administrator's pg_terminate_backend) runs again on a new one, unless a
  // transaction was open: that transaction is lost, and says so.
  template <class F>
  Result retried(F command) {
    reconnect_if_lost();
    Result r(command());
    if (PQstatus(conn_) == CONNECTION_OK) return r;
    if (in_transaction_) {
      in_transaction_ = false;
      return r;  // check() reports the lost connection; the transaction rolls back with it
    }
    reconnect_if_lost();
    return Result(command());
  }

  // A server restart drops the connection; outside a transaction it is
  // safe to connect again and go on.
  void reconnect_if_lost() {
    if (PQstatus(conn_) == CONNECTION_OK) return;
    PQreset(conn_);
    if (PQstatus(conn_) != CONNECTION_OK)
      KILN_FAIL("studio database ", location(), ": the connection was lost and cannot be made again: ",
                one_line(PQerrorMessage(conn_)));
    // The claim went with the old session: take it again, or say who has it.
    if (claimed_ && !claim())
      KILN_FAIL("studio database ", location(), ": another studio took the database while the connection was down");
  }
  void check(PGresult* r, const std::string& sql) const {
    ExecStatusType status = PQresultStatus(r);
    if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return;
    std::string why = one_line(r ? PQresultErrorMessage(r) : PQerrorMessage(conn_));
    KILN_FAIL("studio database ", location(), ": ", why, " (in '", sql.substr(0, 200), "')");
  }
  PGconn* conn_ = nullptr;
  bool claimed_ = false;
  bool in_transaction_ = false;
};

bool PostgresStatement::step() {
  if (!ran_) {
    result_ = db_.run(sql_, params_);
    ran_ = true;
  }
  ++row_;
  return row_ < PQntuples(result_.get());
}

}  // namespace

std::unique_ptr<Database> open_postgres(const std::string& url) { return std::make_unique<PostgresDatabase>(url); }

}  // namespace kiln::studio

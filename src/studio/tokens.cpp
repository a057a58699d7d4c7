#include "studio/tokens.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <ctime>
#include <fstream>

#include "kiln/error.h"

namespace kiln::studio {

const char* scope_name(Scope scope) {
  switch (scope) {
    case Scope::Read: return "read";
    case Scope::Write: return "write";
    case Scope::Admin: return "admin";
  }
  return "read";
}

Scope parse_scope(const std::string& name) {
  if (name == "read") return Scope::Read;
  if (name == "write") return Scope::Write;
  if (name == "admin") return Scope::Admin;
  KILN_FAIL("unknown token scope '", name, "'; the scopes are read, write and admin");
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string utc_time(int64_t ms) {
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm parts{};
  gmtime_r(&seconds, &parts);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &parts);
  return text;
}

std::string hex(const unsigned char* bytes, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  return out;
}

std::string sha256_hex(const void* data, size_t size) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  KILN_CHECK(EVP_Digest(data, size, digest, &length, EVP_sha256(), nullptr) == 1, "SHA-256 failed (OpenSSL)");
  return hex(digest, length);
}

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  KILN_CHECK(ctx_ && EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) == 1,
             "SHA-256 failed (OpenSSL)");
}
Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }
void Sha256::update(const void* data, size_t size) { EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, size); }
std::string Sha256::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), digest, &length);
  return studio::hex(digest, length);
}

std::string sha256_file(const std::string& path, int64_t offset, int64_t length) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), "cannot read ", path);
  in.seekg(offset);
  Sha256 sha;
  std::string buffer(size_t{1} << 20, '\0');
  int64_t left = length < 0 ? INT64_MAX : length;
  while (left > 0 && in) {
    in.read(buffer.data(), static_cast<std::streamsize>(std::min<int64_t>(left, static_cast<int64_t>(buffer.size()))));
    const std::streamsize got = in.gcount();
    if (got <= 0) break;
    sha.update(buffer.data(), static_cast<size_t>(got));
    left -= got;
  }
  return sha.hex();
}

std::string random_secret() {
  unsigned char secret[24];
  KILN_CHECK(RAND_bytes(secret, sizeof secret) == 1, "no random bytes for a token (OpenSSL RAND_bytes failed)");
  return hex(secret, sizeof secret);
}

std::string create_token(Database& db, const std::string& name, Scope scope, int64_t expires_at,
                         const std::string& user) {
  KILN_CHECK(!name.empty() && name.size() <= 100, "a token needs a name of 1 to 100 characters (--name)");
  if (!user.empty()) {
    Statement known(db, "SELECT 1 FROM users WHERE name = ?");
    known.bind(1, user);
    KILN_CHECK(known.step(), "no user '", user, "' (`kiln studio user create ", user, "`)");
  }
  std::string token = "kst_" + random_secret();
  Statement insert(db, "INSERT INTO tokens (name, hash, scope, created_at, expires_at, user_name) VALUES (?, ?, ?, ?, ?, ?)");
  insert.bind(1, name).bind(2, sha256_hex(token.data(), token.size())).bind(3, std::string(scope_name(scope)));
  insert.bind(4, now_ms());
  if (expires_at > 0) insert.bind(5, expires_at);
  else insert.bind_null(5);
  if (!user.empty()) insert.bind(6, user);
  else insert.bind_null(6);
  insert.run();
  return token;
}

std::optional<TokenInfo> find_token(Database& db, const std::string& secret) {
  Statement s(db, "SELECT name, scope, expires_at, user_name FROM tokens WHERE hash = ? AND revoked_at IS NULL");
  s.bind(1, sha256_hex(secret.data(), secret.size()));
  if (!s.step()) return std::nullopt;
  return TokenInfo{s.text(0), parse_scope(s.text(1)), s.is_null(2) ? 0 : s.integer(2), s.is_null(3) ? "" : s.text(3)};
}

std::string TokenListing::state(int64_t now) const {
  if (revoked_ms > 0) return "revoked";
  return expires_ms > 0 && now >= expires_ms ? "expired" : "live";
}

std::vector<TokenListing> list_tokens(Database& db) {
  Statement s(db, "SELECT name, scope, created_at, expires_at, revoked_at, user_name FROM tokens ORDER BY id");
  std::vector<TokenListing> out;
  while (s.step())
    out.push_back({s.text(0), parse_scope(s.text(1)), s.integer(2), s.is_null(3) ? 0 : s.integer(3),
                   s.is_null(4) ? 0 : s.integer(4), s.is_null(5) ? "" : s.text(5)});
  return out;
}

namespace {
std::atomic<uint64_t> revocations{0};
}  // namespace

uint64_t token_revocations() { return revocations.load(); }

int revoke_tokens(Database& db, const std::string& name) {
  ++revocations;
  return static_cast<int>(
      Statement(db, "UPDATE tokens SET revoked_at = ? WHERE name = ? AND revoked_at IS NULL").bind(1, now_ms()).bind(2, name).run());
}

std::string rotate_tokens(Database& db, const std::string& name, int64_t expires_at, int64_t grace_ms) {
  Transaction t(db);
  const int64_t now = now_ms();
  Statement live(db, "SELECT scope, user_name FROM tokens WHERE name = ? AND revoked_at IS NULL AND "
                     "(expires_at IS NULL OR expires_at > ?) ORDER BY id DESC");
  live.bind(1, name).bind(2, now);
  KILN_CHECK(live.step(), "no live token named '", name, "' to rotate; create one with `kiln studio token create --name ",
             name, "`");
  const Scope scope = parse_scope(live.text(0));
  const std::string user = live.is_null(1) ? "" : live.text(1);
  if (grace_ms <= 0) {
    revoke_tokens(db, name);
  } else {
    ++revocations;  // cached lookups learn the new expiry at once
    Statement(db, "UPDATE tokens SET expires_at = ? WHERE name = ? AND revoked_at IS NULL AND "
                  "(expires_at IS NULL OR expires_at > ?)")
        .bind(1, now + grace_ms).bind(2, name).bind(3, now + grace_ms).run();
  }
  std::string token = create_token(db, name, scope, expires_at, user);
  t.commit();
  return token;
}

int64_t parse_duration_ms(const std::string& text) {
  if (text == "never") return 0;
  size_t used = 0;
  double amount = -1;
  try {
    amount = std::stod(text, &used);
  } catch (const std::exception&) {
  }
  const std::string unit = used < text.size() ? text.substr(used) : "";
  const double ms = unit == "d" ? 86400e3 : unit == "h" ? 3600e3 : unit == "m" ? 60e3 : unit == "s" ? 1e3 : -1;
  KILN_CHECK(amount > 0 && ms > 0 && amount * ms < 1e15, "'", text,
             "' is not a duration: give a positive number with d, h, m or s (90d, 12h, 30m), or never");
  return static_cast<int64_t>(amount * ms);
}

}  // namespace kiln::studio

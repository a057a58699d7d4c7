#include "studio/tokens.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
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

namespace {
std::string hex(const unsigned char* bytes, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  return out;
}
}  // namespace

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

std::string create_token(Database& db, const std::string& name, Scope scope) {
  KILN_CHECK(!name.empty() && name.size() <= 100, "a token needs a name of 1 to 100 characters (--name)");
  std::string token = "kst_" + random_secret();
  Statement(db, "INSERT INTO tokens (name, hash, scope, created_at) VALUES (?, ?, ?, ?)")
      .bind(1, name)
      .bind(2, sha256_hex(token.data(), token.size()))
      .bind(3, std::string(scope_name(scope)))
      .bind(4, now_ms())
      .run();
  return token;
}

std::optional<TokenInfo> find_token(Database& db, const std::string& secret) {
  Statement s(db, "SELECT name, scope FROM tokens WHERE hash = ? AND revoked_at IS NULL");
  s.bind(1, sha256_hex(secret.data(), secret.size()));
  if (!s.step()) return std::nullopt;
  return TokenInfo{s.text(0), parse_scope(s.text(1))};
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

}  // namespace kiln::studio

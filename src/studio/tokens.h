#pragma once
// API tokens: random secrets shown once at creation and stored as their
// SHA-256, each with a scope (read < write < admin) and, when asked for, a
// time it expires. Rotating a name gives it a new token and lets the old
// ones run out after a grace period, so clients can move over.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/studio.h"
#include "studio/database.h"

namespace kiln::studio {

struct TokenInfo {
  std::string name;
  Scope scope = Scope::Read;
  int64_t expires_at = 0;  // milliseconds since the epoch; 0: never
  std::string user;        // the user it acts for; empty: a studio-wide token (projects.h)
  bool expired(int64_t now) const { return expires_at > 0 && now >= expires_at; }
};

// Bytes as lowercase hex digits.
std::string hex(const unsigned char* bytes, size_t n);
// 48 random hex digits (OpenSSL's generator).
std::string random_secret();
// Creates a token and returns its secret ("kst_" and 48 hex digits);
// expires_at 0: it never expires. With a user, the token acts for that user.
std::string create_token(Database& db, const std::string& name, Scope scope, int64_t expires_at = 0,
                         const std::string& user = "");
// The token a secret belongs to, unless it is unknown or revoked (an expired
// one comes back: the caller says so).
std::optional<TokenInfo> find_token(Database& db, const std::string& secret);
// A new token of the name's scope and user; the name's live tokens expire after
// grace_ms (at once: revoked). Throws when the name has no live token.
std::string rotate_tokens(Database& db, const std::string& name, int64_t expires_at, int64_t grace_ms);
std::vector<TokenListing> list_tokens(Database& db);
// Revokes every token of that name; returns how many there were.
int revoke_tokens(Database& db, const std::string& name);
// Revocations made by this process so far: a cache of checked tokens is
// stale once it changes.
uint64_t token_revocations();



}  // namespace kiln::studio

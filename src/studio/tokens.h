#pragma once
// API tokens: random secrets shown once at creation and stored as their
// SHA-256, each with a scope (read < write < admin).
#include <cstdint>
#include <optional>
#include <string>

#include "kiln/studio.h"
#include "studio/database.h"

namespace kiln::studio {

struct TokenInfo {
  std::string name;
  Scope scope = Scope::Read;
};

// 48 random hex digits (OpenSSL's generator).
std::string random_secret();
// Creates a token and returns its secret ("kst_" and 48 hex digits).
std::string create_token(Database& db, const std::string& name, Scope scope);
// The token a secret belongs to, unless it is unknown or revoked.
std::optional<TokenInfo> find_token(Database& db, const std::string& secret);
// Revokes every token of that name; returns how many there were.
int revoke_tokens(Database& db, const std::string& name);
// Revocations made by this process so far: a cache of checked tokens is
// stale once it changes.
uint64_t token_revocations();

int64_t now_ms();

}  // namespace kiln::studio

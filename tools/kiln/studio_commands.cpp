// `kiln studio serve | token create | token revoke` and the object store's
// client, `kiln store ls | mb | cp | sync | rm` between local paths and studio://bucket/key.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <map>

#include "kiln/error.h"
#include "kiln/studio.h"
#include "store_shards.h"
#include "store_transfer.h"
#include "studio_client.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

// `kiln store cp` and `sync`: the plan, then the transfers in parallel.
void transfer(const std::string& server, const std::string& token, const std::string& src, const std::string& dst,
              bool mirror, int jobs) {
  Remote remote(server, token);
  TransferPlan plan = plan_transfers(remote, src, dst, mirror);
  run_transfers(plan, server, token, jobs, is_store_url(dst) ? "uploaded" : "downloaded", dst);
}

}  // namespace

void add_studio_commands(CLI::App& app) {
  auto* studio = app.add_subcommand("studio", "Kiln Studio, the platform server");
  studio->require_subcommand(1);
  auto o = std::make_shared<studio::StudioOptions>();
  auto* serve = studio->add_subcommand("serve", "Run the studio: REST API under /api/v1, state in --data");
  serve->add_option("--data", o->data_dir, "Data directory (database and objects); created if missing");
  serve->add_option("--db", o->database,
                    "Database: postgresql://USER:PASSWORD@HOST:PORT/NAME, or a SQLite file (default: DATA/studio.db)")
      ->envname("KILN_STUDIO_DB");
  serve->add_option("--host", o->host, "Address to listen on (default 127.0.0.1: this machine only)");
  serve->add_option("--port", o->port, "Port (0: any free one)")->check(CLI::Range(0, 65535));
  serve->add_option("--access-log", o->access_log, "Access log file ('-': stderr, '': none)");
  serve->add_option("--executor", o->executor, "Where jobs run: local (default) or slurm (sbatch)")
      ->check(CLI::IsMember({"local", "slurm"}));
  serve->add_option("--slurm-partition", o->slurm_partition, "The Slurm partition for jobs (default: the cluster's)");
  serve->add_option("--cpus", o->cpus, "CPU cores the local executor runs jobs on at once (default: the machine's)")
      ->check(CLI::NonNegativeNumber);
  serve->add_option("--memory-mb", o->memory_mb, "Memory the local executor's jobs may claim, in MB (default: the machine's)")
      ->check(CLI::NonNegativeNumber);
  serve->add_option("--gpus", o->gpus, "GPUs the local executor hands out (default 0)")->check(CLI::NonNegativeNumber);
  serve->add_option("--sandbox", o->sandbox,
                    "Each local job in a sandbox (bubblewrap) that hides the studio's data: auto (where it works), "
                    "bwrap (required) or off")
      ->check(CLI::IsMember({"auto", "bwrap", "off"}));
  serve->add_option("--console-dir", o->console_dir, "The web console's built files, served at / (default: this build's)");
  auto upload_mb = std::make_shared<double>(1024);
  serve->add_option("--max-upload-mb", *upload_mb, "Largest object one upload may carry, in MiB (default 1024)")
      ->check(CLI::PositiveNumber);
  serve->callback([o, upload_mb] {
    o->max_upload_bytes = static_cast<size_t>(*upload_mb * 1024 * 1024);
    int rc = studio::run_studio(*o);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });

  auto* token = studio->add_subcommand("token", "Create, list, rotate or revoke API tokens");
  token->require_subcommand(1);
  auto data = std::make_shared<std::string>("studio-data");
  auto db = std::make_shared<std::string>();
  auto name = std::make_shared<std::string>();
  auto scope = std::make_shared<std::string>("read");
  auto expires = std::make_shared<std::string>("never");
  auto grace = std::make_shared<std::string>("0s");
  auto* create = token->add_subcommand("create", "Create a token and print it (it is shown once)");
  create->add_option("--data", *data, "The studio's data directory");
  create->add_option("--db", *db, "The studio's database, when not DATA/studio.db")->envname("KILN_STUDIO_DB");
  create->add_option("--name", *name, "A name for the token (in the audit log)")->required();
  create->add_option("--scope", *scope, "read, write or admin")->check(CLI::IsMember({"read", "write", "admin"}));
  create->add_option("--expires", *expires, "How long it works: 90d, 12h, 30m, 45s, or never (the default)");
  auto user = std::make_shared<std::string>();
  create->add_option("--user", *user, "The user it acts for, with the user's roles (default: studio-wide)");
  create->callback([data, db, name, scope, expires, user] {
    const int64_t ms = studio::parse_duration_ms(*expires);
    std::printf("%s\n", studio::create_token(*data, *name, studio::parse_scope(*scope), *db, ms, *user).c_str());
  });
  auto* rotate = token->add_subcommand("rotate", "Give a name a new token (printed once); its old ones stop after --grace");
  rotate->add_option("--data", *data, "The studio's data directory");
  rotate->add_option("--db", *db, "The studio's database, when not DATA/studio.db")->envname("KILN_STUDIO_DB");
  rotate->add_option("--name", *name, "The tokens' name")->required();
  rotate->add_option("--expires", *expires, "How long the new token works: 90d, 12h, 30m, 45s, or never");
  rotate->add_option("--grace", *grace, "How long the old tokens keep working (default 0s: revoked at once)");
  rotate->callback([data, db, name, expires, grace] {
    const int64_t ms = studio::parse_duration_ms(*expires);
    const int64_t grace_ms = *grace == "0s" ? 0 : studio::parse_duration_ms(*grace);
    std::printf("%s\n", studio::rotate_token(*data, *name, ms, grace_ms, *db).c_str());
  });
  auto* list = token->add_subcommand("list", "Every token's name, scope, state and times (never the secrets)");
  list->add_option("--data", *data, "The studio's data directory");
  list->add_option("--db", *db, "The studio's database, when not DATA/studio.db")->envname("KILN_STUDIO_DB");
  list->callback([data, db] {
    const auto tokens = studio::list_tokens(*data, *db);
    const int64_t now = studio::now_ms();
    std::printf("%-24s %-6s %-8s %-16s %-21s %s\n", "name", "scope", "state", "user", "created", "expires");
    for (const auto& t : tokens)
      std::printf("%-24s %-6s %-8s %-16s %-21s %s\n", t.name.c_str(), studio::scope_name(t.scope),
                  t.state(now).c_str(), t.user.empty() ? "(studio-wide)" : t.user.c_str(),
                  studio::utc_time(t.created_ms).c_str(), t.expires_ms > 0 ? studio::utc_time(t.expires_ms).c_str() : "never");
    std::printf("%zu token%s\n", tokens.size(), tokens.size() == 1 ? "" : "s");
  });
  auto* revoke = token->add_subcommand("revoke", "Revoke every token of a name");
  revoke->add_option("--data", *data, "The studio's data directory");
  revoke->add_option("--db", *db, "The studio's database, when not DATA/studio.db")->envname("KILN_STUDIO_DB");
  revoke->add_option("--name", *name, "The tokens' name")->required();
  revoke->callback([data, db, name] {
    int n = studio::revoke_tokens(*data, *name, *db);
    KILN_CHECK(n > 0, "no live token named '", *name, "'");
    std::printf("revoked %d token%s named %s\n", n, n == 1 ? "" : "s", name->c_str());
  });

  auto* store = app.add_subcommand("store", "Copy, list and remove objects in a studio's store (studio://BUCKET/KEY)");
  store->require_subcommand(1);
  auto server = std::make_shared<std::string>();
  auto secret = std::make_shared<std::string>();
  auto args = std::make_shared<std::vector<std::string>>();
  auto recursive = std::make_shared<bool>(false);
  auto* ls = store->add_subcommand("ls", "List buckets (studio://) or the objects under a prefix");
  ls->add_option("url", *args, "studio://BUCKET/PREFIX")->required();
  ls->callback([server, secret, args] {
    Remote remote(*server, *secret);
    std::string url = args->at(0);
    KILN_CHECK(is_store_url(url), "'", url, "' is not a store URL (studio://BUCKET/PREFIX)");
    if (url == "studio://" || url == "studio:///") {
      auto buckets = remote.get_json("/api/v1/buckets")["buckets"];
      for (auto& b : buckets) std::printf("%s\n", b.get<std::string>().c_str());
      if (buckets.empty()) std::printf("no buckets yet (kiln store mb studio://NAME makes one)\n");
      return;
    }
    StoreUrl u = parse_store_url(url);
    int64_t total = 0, count = 0;
    for (auto& o : remote.list(u.bucket, u.key)) {
      std::printf("%12lld  %.12s  %s\n", static_cast<long long>(o["size"].get<int64_t>()),
                  o["sha256"].get<std::string>().c_str(), o["key"].get<std::string>().c_str());
      total += o["size"].get<int64_t>();
      ++count;
    }
    std::printf("%lld object%s, %lld bytes\n", static_cast<long long>(count), count == 1 ? "" : "s",
                static_cast<long long>(total));
  });
  auto* mb = store->add_subcommand("mb", "Make a bucket");
  mb->add_option("url", *args, "studio://BUCKET")->required();
  auto project = std::make_shared<std::string>();
  mb->add_option("--project", *project, "The project it belongs to (default: default)");
  mb->callback([server, secret, args, project] {
    Remote remote(*server, *secret);
    StoreUrl u = parse_store_url(args->at(0));
    KILN_CHECK(u.key.empty(), "mb takes a bucket (studio://BUCKET), not a key");
    remote.make_bucket(u.bucket, *project);
    std::printf("made bucket studio://%s\n", u.bucket.c_str());
  });
  auto jobs = std::make_shared<int>(4);
  auto* cp = store->add_subcommand("cp", "Copy files to or from the store (directories recursively, unchanged files skipped)");
  cp->add_option("paths", *args, "SRC DST")->required()->expected(2);
  cp->add_option("-j,--jobs", *jobs, "Files transferred at once (default 4)");
  cp->callback([server, secret, args, jobs] { transfer(*server, *secret, args->at(0), args->at(1), false, *jobs); });
  auto mirror = std::make_shared<bool>(false);
  auto* sync = store->add_subcommand("sync", "Make DST hold what SRC holds: changed files copied; with --delete, what SRC lacks removed");
  sync->add_option("paths", *args, "SRC DST")->required()->expected(2);
  sync->add_option("-j,--jobs", *jobs, "Files transferred at once (default 4)");
  sync->add_flag("--delete", *mirror, "Remove what the destination holds and the source does not");
  sync->callback([server, secret, args, jobs, mirror] {
    transfer(*server, *secret, args->at(0), args->at(1), *mirror, *jobs);
  });
  auto* rm = store->add_subcommand("rm", "Remove an object, or everything under a prefix with -r");
  rm->add_option("url", *args, "studio://BUCKET/KEY")->required();
  rm->add_flag("-r,--recursive", *recursive, "Remove every object under the prefix");
  rm->callback([server, secret, args, recursive] {
    Remote remote(*server, *secret);
    StoreUrl u = parse_store_url(args->at(0));
    if (!*recursive) {
      remote.remove(u);
      std::printf("removed studio://%s/%s\n", u.bucket.c_str(), u.key.c_str());
      return;
    }
    int n = 0;
    for (auto& o : remote.list(u.bucket, u.key)) {
      remote.remove({u.bucket, o["key"].get<std::string>()});
      ++n;
    }
    std::printf("removed %d objects under studio://%s/%s\n", n, u.bucket.c_str(), u.key.c_str());
  });
  auto shard_size = std::make_shared<std::string>("256MB");
  auto* pack = store->add_subcommand("pack", "Pack a folder of many small files into tar shards in the store (WebDataset's layout)");
  pack->add_option("paths", *args, "SRC studio://BUCKET/PREFIX/NAME")->required()->expected(2);
  pack->add_option("--shard-size", *shard_size, "About how large each shard is (default 256MB)");
  pack->add_option("-j,--jobs", *jobs, "Shards uploaded at once (default 4)");
  auto labels = std::make_shared<bool>(false);
  pack->add_flag("--labels-from-folders", *labels,
                 "SRC holds a folder per class: give each sample a .cls field with its class index");
  pack->callback([server, secret, args, shard_size, jobs, labels] {
    pack_to_store(*server, *secret, args->at(0), args->at(1), parse_size(*shard_size), *jobs, *labels);
  });
  auto* unpack = store->add_subcommand("unpack", "Unpack the shards NAME-NNNNNN.tar from the store into a folder");
  unpack->add_option("paths", *args, "studio://BUCKET/PREFIX/NAME DST")->required()->expected(2);
  unpack->add_option("-j,--jobs", *jobs, "Shards downloaded at once (default 4)");
  unpack->callback([server, secret, args, jobs] { unpack_from_store(*server, *secret, args->at(0), args->at(1), *jobs); });
  for (auto* sub : {ls, mb, cp, sync, rm, pack, unpack}) {
    sub->add_option("--server", *server, "Studio URL (default: KILN_STUDIO_URL, or http://127.0.0.1:8080)");
    sub->add_option("--token", *secret, "API token (default: KILN_STUDIO_TOKEN)");
  }
}

}  // namespace kiln::cli

#!/usr/bin/env bash
# Runs a command with a PostgreSQL server of its own: a cluster made in a
# temporary directory, listening on a free loopback port, stopped and removed
# at the end. The command finds the server's URL in KILN_TEST_POSTGRES.
# PostgreSQL refuses to run as root, so as root the server runs as the
# postgres user (Debian's postgresql package makes it).
set -euo pipefail

bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
  echo "with_postgres: no PostgreSQL server; apt-get install postgresql (scripts/install-deps.sh does)" >&2
  exit 1
fi
dir="$(mktemp -d /tmp/kiln-postgres.XXXXXX)"
as=()
if [ "$(id -u)" -eq 0 ]; then
  chown postgres: "$dir"
  as=(runuser -u postgres --)
fi
stop() {
  "${as[@]}" "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap stop EXIT

"${as[@]}" "$bin/initdb" -D "$dir/data" -U kiln --auth=trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
  { cat "$dir/initdb.log" >&2; exit 1; }
# The port is free when chosen; a test beside this one may take it before
# the server binds it, and then the server starts again on another.
for attempt in 1 2 3 4 5; do
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  # Durability is not what the tests check: without fsync the cluster is quick.
  if "${as[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off" start >/dev/null; then
    break
  fi
  [ "$attempt" -lt 5 ] || { cat "$dir/server.log" >&2; exit 1; }
  echo "with_postgres: the server did not start on port $port (try $attempt); trying another" >&2
done

export KILN_TEST_POSTGRES="postgresql://kiln@127.0.0.1:$port"
echo "with_postgres: PostgreSQL $("$bin/postgres" --version | awk '{print $3}') at $KILN_TEST_POSTGRES" >&2
rc=0
"$@" || rc=$?
exit $rc

#!/usr/bin/env bash
# Runs a throwaway PostgreSQL natively for Temporal, as the production
# topology needs it: a new cluster in DIR on 127.0.0.1:PORT, a role
# temporal (password temporal), and the databases temporal and
# temporal_visibility set up and updated to the latest schema with
# temporal-sql-tool (what temporalio/auto-setup does in docker-compose.yml).
#
#   tools/postgres.sh start DIR PORT   DIR must not exist, or be empty
#   tools/postgres.sh stop DIR         immediate shutdown (as a crash: recovery on start); none if not running
#   tools/postgres.sh restart DIR PORT start DIR's cluster again after stop
#
# Needs Debian's postgresql package (initdb, pg_ctl, psql; found under
# /usr/lib/postgresql/*/bin, or set PG_BINDIR) and the binaries and schema of
# tools/build.sh (in $WDC_TEMPORAL_TOOLS, default
# ${XDG_CACHE_HOME:-$HOME/.cache}/wdc-tools/temporal). PostgreSQL refuses to
# run as root: as root the server runs as the postgres user (runuser).
# Progress goes to stderr; the server's log is DIR/postgres.log.
set -euo pipefail

die() { echo "tools/postgres.sh: $*" >&2; exit 1; }

bindir="${PG_BINDIR:-}"
if [ -z "$bindir" ]; then
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$d/initdb" ]; then bindir=$d; break; fi
  done
fi
if [ -z "$bindir" ] && command -v initdb >/dev/null; then bindir=$(dirname "$(command -v initdb)"); fi
[ -n "$bindir" ] && [ -x "$bindir/initdb" ] ||
  die "PostgreSQL's initdb not found (apt-get install postgresql, or set PG_BINDIR)"

# as_pg runs a command as the user who owns the cluster.
as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# pg_start DIR PORT starts the cluster in DIR/data on 127.0.0.1:PORT and
# waits until it accepts connections.
pg_start() {
  as_pg "$bindir/pg_ctl" -D "$1/data" -l "$1/postgres.log" -w -t 60 \
    -o "-p $2 -k $1 -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start >/dev/null ||
    { tail -40 "$1/postgres.log" >&2; die "pg_ctl start failed"; }
}

case "${1:-}" in
start)
  [ $# = 3 ] || die "usage: $0 start DIR PORT"
  dir=$2 port=$3
  tools="${WDC_TEMPORAL_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/wdc-tools/temporal}"
  sqltool="$tools/bin/temporal-sql-tool"
  schema="$tools/schema/postgresql/v12"
  [ -x "$sqltool" ] || die "$sqltool not found: run tools/build.sh first"
  [ -d "$schema" ] || die "$schema not found: run tools/build.sh first"
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || die "no postgres user to run PostgreSQL as (apt-get install postgresql)"
  fi
  mkdir -p "$dir"
  [ -z "$(ls -A "$dir")" ] || die "$dir is not empty"
  if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; fi
  chmod 700 "$dir"
  echo "postgres: initdb $dir/data ($bindir)" >&2
  as_pg "$bindir/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 ||
    { cat "$dir/initdb.log" >&2; die "initdb failed"; }
  echo "postgres: starting on 127.0.0.1:$port" >&2
  pg_start "$dir" "$port"
  as_pg "$bindir/psql" -h "$dir" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 -q \
    -c "CREATE ROLE temporal LOGIN SUPERUSER PASSWORD 'temporal'" ||
    die "create role temporal failed"
  sql() { "$sqltool" --plugin postgres12 --ep 127.0.0.1 -p "$port" -u temporal -pw temporal "$@"; }
  for db in temporal:temporal temporal_visibility:visibility; do
    name=${db%%:*} sub=${db##*:}
    echo "postgres: temporal-sql-tool: create-database, setup-schema, update-schema for $name" >&2
    {
      sql --db "$name" create-database &&
        sql --db "$name" setup-schema -v 0.0 &&
        sql --db "$name" update-schema -d "$schema/$sub/versioned"
    } >>"$dir/schema.log" 2>&1 || { cat "$dir/schema.log" >&2; die "schema setup of $name failed"; }
  done
  echo "postgres: ready on 127.0.0.1:$port (databases temporal, temporal_visibility; user temporal)" >&2
  ;;
stop)
  [ $# = 2 ] || die "usage: $0 stop DIR"
  dir=$2
  [ -d "$dir/data" ] || exit 0
  as_pg "$bindir/pg_ctl" -D "$dir/data" status >/dev/null 2>&1 || exit 0 # not running
  as_pg "$bindir/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null || die "pg_ctl stop failed"
  ;;
restart)
  [ $# = 3 ] || die "usage: $0 restart DIR PORT"
  dir=$2 port=$3
  [ -d "$dir/data" ] || die "$dir/data not found: start it first"
  pg_start "$dir" "$port"
  ;;
*)
  die "usage: $0 start DIR PORT | stop DIR | restart DIR PORT"
  ;;
esac

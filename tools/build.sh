#!/usr/bin/env bash
# Builds the official Temporal binaries that wdc's topology test runs, from
# this module's go.temporal.io/server version, into a cache directory
# outside the repository, and copies beside them what they need at run time
# (the PostgreSQL schema). Nothing is rebuilt when the cache already holds
# the version of go.mod.
#
#   tools/build.sh            build if missing; prints the directory on stdout
#
# Layout of the directory ($WDC_TEMPORAL_TOOLS, default
# ${XDG_CACHE_HOME:-$HOME/.cache}/wdc-tools/temporal):
#   VERSION                      the server module version it was built from
#   bin/temporal-server          go.temporal.io/server/cmd/server
#   bin/temporal-sql-tool        go.temporal.io/server/cmd/tools/sql
#   schema/postgresql/v12/...    the server module's PostgreSQL schema
#
# Progress goes to stderr. A cold build takes several minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")"

out="${WDC_TEMPORAL_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/wdc-tools/temporal}"
version=$(go list -m -f '{{.Version}}' go.temporal.io/server)

if [ -x "$out/bin/temporal-server" ] && [ -x "$out/bin/temporal-sql-tool" ] &&
  [ -d "$out/schema/postgresql/v12" ] && [ "$(cat "$out/VERSION" 2>/dev/null)" = "$version" ]; then
  echo "tools: temporal-server and temporal-sql-tool $version already in $out" >&2
  echo "$out"
  exit 0
fi

echo "tools: building temporal-server and temporal-sql-tool $version into $out (a cold build takes minutes)" >&2
began=$(date +%s)
rm -rf "$out.tmp"
mkdir -p "$out.tmp/bin" "$out.tmp/schema"
go mod download go.temporal.io/server
echo "tools: go build go.temporal.io/server/cmd/tools/sql" >&2
go build -o "$out.tmp/bin/temporal-sql-tool" go.temporal.io/server/cmd/tools/sql
echo "tools: go build go.temporal.io/server/cmd/server" >&2
go build -o "$out.tmp/bin/temporal-server" go.temporal.io/server/cmd/server
moddir=$(go list -m -f '{{.Dir}}' go.temporal.io/server)
echo "tools: copying the PostgreSQL schema from $moddir/schema/postgresql" >&2
cp -R "$moddir/schema/postgresql" "$out.tmp/schema/"
chmod -R u+w "$out.tmp/schema"
echo "$version" >"$out.tmp/VERSION"
rm -rf "$out"
mv "$out.tmp" "$out"
echo "tools: built in $(($(date +%s) - began)) s" >&2
echo "$out"

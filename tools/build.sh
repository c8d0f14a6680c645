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
# One build runs at a time: a second build.sh waits on the lock file
# $out.lock and then finds the binaries built.
set -euo pipefail
cd "$(dirname "$0")"

out="${WDC_TEMPORAL_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/wdc-tools/temporal}"
mkdir -p "$(dirname "$out")"
exec 9>>"$out.lock"
flock 9

# Build against a copy of go.mod that also requires wdc itself (../): every
# module the two share is then at wdc's version, so the server packages
# wdc's system tests link (internal/devserver) compile to the same Go build
# cache entries here and there, and whichever build runs second reuses
# them. The copy absorbs any drift from wdc's go.mod (-mod=mod writes only
# the copy); tools/go.mod and go.sum are never written.
mod=$(mktemp -d)
trap 'rm -rf "$mod"' EXIT
cp go.mod "$mod/go.mod"
cat go.sum ../go.sum >"$mod/go.sum"
go mod edit -modfile="$mod/go.mod" -require=github.com/wdc-runtime/wdc@v0.0.0-00010101000000-000000000000 -replace=github.com/wdc-runtime/wdc="$(cd .. && pwd)"
gomod=(-modfile="$mod/go.mod" -mod=mod)
version=$(go list "${gomod[@]}" -m -f '{{.Version}}' go.temporal.io/server)

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
go mod download -modfile="$mod/go.mod" go.temporal.io/server
echo "tools: go build go.temporal.io/server/cmd/tools/sql" >&2
go build "${gomod[@]}" -ldflags "-s -w" -o "$out.tmp/bin/temporal-sql-tool" go.temporal.io/server/cmd/tools/sql
echo "tools: go build go.temporal.io/server/cmd/server" >&2
go build "${gomod[@]}" -ldflags "-s -w" -o "$out.tmp/bin/temporal-server" go.temporal.io/server/cmd/server
moddir=$(go list "${gomod[@]}" -m -f '{{.Dir}}' go.temporal.io/server)
echo "tools: copying the PostgreSQL schema from $moddir/schema/postgresql" >&2
cp -R "$moddir/schema/postgresql" "$out.tmp/schema/"
chmod -R u+w "$out.tmp/schema"
echo "$version" >"$out.tmp/VERSION"
rm -rf "$out"
mv "$out.tmp" "$out"
echo "tools: built in $(($(date +%s) - began)) s" >&2
echo "$out"

#!/usr/bin/env bash
# Builds the SPIRE server and agent that wdc's SPIRE system test runs
# (testsuite/spire_test.go, internal/testenv/spire), at the version this
# module's go.mod names as tools, into a cache directory outside the
# repository. Nothing is rebuilt when the cache already holds that version.
#
#   tools/spire/build.sh      build if missing; prints the directory on stdout
#
# Layout of the directory ($WDC_SPIRE_TOOLS, default
# ${XDG_CACHE_HOME:-$HOME/.cache}/wdc-tools/spire):
#   VERSION          the github.com/spiffe/spire module version
#   bin/spire-server github.com/spiffe/spire/cmd/spire-server
#   bin/spire-agent  github.com/spiffe/spire/cmd/spire-agent
#
# Progress goes to stderr. Cold, on 2 cores: about 5 minutes of module
# downloads and 5 of building. One build runs at a time (flock on
# $out.lock); a second one waits and then finds the binaries built.
set -euo pipefail
cd "$(dirname "$0")"

out="${WDC_SPIRE_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/wdc-tools/spire}"
mkdir -p "$(dirname "$out")"
exec 9>>"$out.lock"
flock 9

version=$(go list -m -f '{{.Version}}' github.com/spiffe/spire)
if [ -x "$out/bin/spire-server" ] && [ -x "$out/bin/spire-agent" ] &&
  [ "$(cat "$out/VERSION" 2>/dev/null)" = "$version" ]; then
  echo "tools: spire-server and spire-agent $version already in $out" >&2
  echo "$out"
  exit 0
fi

echo "tools: building spire-server and spire-agent $version into $out" >&2
began=$(date +%s)
rm -rf "$out.tmp"
mkdir -p "$out.tmp/bin"
go mod download
for cmd in spire-server spire-agent; do
  echo "tools: go build $cmd" >&2
  go build -ldflags "-s -w" -o "$out.tmp/bin/$cmd" "github.com/spiffe/spire/cmd/$cmd"
done
echo "$version" >"$out.tmp/VERSION"
rm -rf "$out"
mv "$out.tmp" "$out"
echo "tools: built in $(($(date +%s) - began)) s" >&2
echo "$out"

#!/usr/bin/env bash
# Builds the Kubernetes control plane that wdc's Kubernetes launcher tests
# run against — kube-apiserver, kube-controller-manager and etcd, at the
# versions of this module's go.mod — into a cache directory outside the
# repository. Nothing is rebuilt when the cache already holds that version.
#
#   tools/k8s/build.sh        build if missing; prints the directory on stdout
#
# Layout of the directory ($WDC_K8S_TOOLS, default
# ${XDG_CACHE_HOME:-$HOME/.cache}/wdc-tools/k8s):
#   VERSION                        "<kubernetes version> <etcd version>"
#   bin/kube-apiserver             k8s.io/kubernetes/cmd/kube-apiserver
#   bin/kube-controller-manager    k8s.io/kubernetes/cmd/kube-controller-manager
#   bin/etcd                       go.etcd.io/etcd/server/v3
#
# Progress goes to stderr. A cold build takes about 13 minutes on 2 cores
# when wdc's tests have compiled the packages it shares with them, more
# when it compiles those itself; it keeps about one core busy. A rebuild
# on a warm Go cache takes about a minute.
# One build runs at a time: a second build.sh (or a test that needs the
# binaries, internal/testenv/kube) waits on the lock file $out.lock and
# then finds the binaries built.
set -euo pipefail
cd "$(dirname "$0")"

out="${WDC_K8S_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/wdc-tools/k8s}"
mkdir -p "$(dirname "$out")"
exec 9>>"$out.lock"
flock 9

# Build against a copy of go.mod that also requires wdc itself (../..):
# every module the two share (client-go, apimachinery, grpc, protobuf, …)
# is then at wdc's version, so those packages compile to the same Go build
# cache entries as for wdc's own tests, and whichever build runs second
# reuses them (hence no -trimpath, which would change every entry). The
# copy absorbs any drift from wdc's go.mod (-mod=mod writes only the
# copy); tools/k8s/go.mod and go.sum are never written.
mod=$(mktemp -d)
trap 'rm -rf "$mod"' EXIT
cp go.mod "$mod/go.mod"
cat go.sum ../../go.sum >"$mod/go.sum"
go mod edit -modfile="$mod/go.mod" -require=github.com/wdc-runtime/wdc@v0.0.0-00010101000000-000000000000 -replace=github.com/wdc-runtime/wdc="$(cd ../.. && pwd)"
gomod=(-modfile="$mod/go.mod" -mod=mod)
kube=$(go list "${gomod[@]}" -m -f '{{.Version}}' k8s.io/kubernetes)
etcd=$(go list "${gomod[@]}" -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
version="$kube $etcd"

if [ -x "$out/bin/kube-apiserver" ] && [ -x "$out/bin/kube-controller-manager" ] &&
  [ -x "$out/bin/etcd" ] && [ "$(cat "$out/VERSION" 2>/dev/null)" = "$version" ]; then
  echo "tools: kube-apiserver, kube-controller-manager $kube and etcd $etcd already in $out" >&2
  echo "$out"
  exit 0
fi

echo "tools: building kube-apiserver, kube-controller-manager $kube and etcd $etcd into $out (a cold build takes about 13 minutes)" >&2
began=$(date +%s)
rm -rf "$out.tmp"
mkdir -p "$out.tmp/bin"
go mod download -modfile="$mod/go.mod"
# Without these the binaries report v0.0.0-master on /version.
minor=${kube#v1.}
minor=${minor%%.*}
ldflags="-s -w"
for key in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $key.gitVersion=$kube -X $key.gitMajor=1 -X $key.gitMinor=$minor"
done
echo "tools: go build etcd" >&2
go build "${gomod[@]}" -ldflags "-s -w" -o "$out.tmp/bin/etcd" go.etcd.io/etcd/server/v3
echo "tools: go build kube-apiserver" >&2
go build "${gomod[@]}" -ldflags "$ldflags" -o "$out.tmp/bin/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
echo "tools: go build kube-controller-manager" >&2
go build "${gomod[@]}" -ldflags "$ldflags" -o "$out.tmp/bin/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager
echo "$version" >"$out.tmp/VERSION"
rm -rf "$out"
mv "$out.tmp" "$out"
echo "tools: built in $(($(date +%s) - began)) s" >&2
echo "$out"

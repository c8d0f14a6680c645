//go:build tools

// Package tools records the packages build.sh builds, so that `go mod tidy`
// keeps their dependencies in go.sum.
package tools

import (
	_ "go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

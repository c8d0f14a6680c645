// Package devopts holds the options and handle of an embedded dev server
// without importing go.temporal.io/server, so the CLI (and its tests) can
// describe and drive a dev server while only package devserver links the
// server itself (see docs/architecture.md, "Processes and task queues").
package devopts

import (
	"context"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
)

// Options configures an embedded dev server. The zero value is an
// in-memory server on a random port without the Web UI.
type Options struct {
	// DBFilename is the SQLite file holding all state; empty keeps it in
	// memory (lost on stop). A restart on the same file keeps every workflow.
	DBFilename string
	// IP is the frontend's bind address. Default 127.0.0.1 (an IP, not a
	// host name).
	IP string
	// Port is the frontend gRPC port; 0 picks a free one.
	Port int
	// UIPort is the Web UI's HTTP port; 0 means Port+1000 (the `temporal
	// server start-dev` convention).
	UIPort int
	// EnableUI serves the Temporal Web UI.
	EnableUI bool
	// Namespaces are created besides "default"; existing ones are kept.
	Namespaces []string
	// SearchAttributes are registered on every namespace before start.
	// SQLite visibility allows 10 Keyword and 3 Int custom attributes.
	SearchAttributes map[string]enumspb.IndexedValueType
	// LogLevel is the server's log level: debug, info, warn, error or off
	// (default).
	LogLevel string
	// SuggestContinueAsNewAfter maps a namespace to the number of history
	// events after which Temporal suggests continue-as-new to its
	// workflows (Temporal's default is 4096). Tests lower it on a
	// namespace of their own to exercise continue-as-new under load.
	SuggestContinueAsNewAfter map[string]int
}

// Server is a running embedded server.
type Server interface {
	// FrontendHostPort is the gRPC address clients dial.
	FrontendHostPort() string
	// UIAddress is the Web UI URL, or "" when the UI is off.
	UIAddress() string
	// StartupDuration is how long the start took until the frontend answered.
	StartupDuration() time.Duration
	// Stop stops the UI and the server.
	Stop() error
}

// StartFunc starts an embedded server (devserver.Start).
type StartFunc func(ctx context.Context, opts Options) (Server, error)

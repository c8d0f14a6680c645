package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/internal/devopts"
)

func (a *app) newServerCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "server",
		Short: "Run an embedded Temporal server",
	}
	c.AddCommand(a.newStartDevCommand())
	return c
}

type startDevOptions struct {
	dbFilename string
	ip         string
	port       int
	uiPort     int
	headless   bool
	namespaces []string
	logLevel   string
}

func (a *app) newStartDevCommand() *cobra.Command {
	o := &startDevOptions{}
	c := &cobra.Command{
		Use:   "start-dev",
		Short: "Start an embedded Temporal server with wdc's search attributes and the Web UI",
		Long: `Start a complete Temporal server inside this process (go.temporal.io/server):
SQLite persistence, namespace "default" (plus any --namespace), every wdc search
attribute registered before the first workflow, and the Temporal Web UI.

State lives in --db-filename; without it, everything is kept in memory and lost
on exit. Restarting on the same file keeps every workflow (workers, tasks, runs).
Stop with Ctrl-C (SIGINT) or SIGTERM.`,
		Example: `  wdc server start-dev --db-filename wdc.db
  wdc server start-dev --port 7233 --ui-port 8233 --namespace science
  wdc server start-dev --headless`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			return a.runStartDev(c.Context(), o)
		},
	}
	f := c.Flags()
	f.StringVarP(&o.dbFilename, "db-filename", "f", "", "SQLite file for all state (created if absent); empty keeps state in memory")
	f.StringVar(&o.ip, "ip", "127.0.0.1", "IP address the frontend and UI bind to")
	f.IntVarP(&o.port, "port", "p", 7233, "frontend gRPC port")
	f.IntVar(&o.uiPort, "ui-port", 0, "Web UI port (default: --port + 1000)")
	f.BoolVar(&o.headless, "headless", false, "do not serve the Web UI")
	f.StringArrayVar(&o.namespaces, "namespace", nil, "extra namespace to create (repeatable); \"default\" always exists")
	f.StringVar(&o.logLevel, "server-log-level", "off", "the Temporal server's own log level: debug, info, warn, error, off")
	return c
}

func (o *startDevOptions) validate() error {
	if net.ParseIP(o.ip) == nil {
		return usagef("--ip %q: not an IP address", o.ip)
	}
	if o.port < 1 || o.port > 65535 {
		return usagef("--port %d: want 1-65535", o.port)
	}
	if o.uiPort == 0 {
		o.uiPort = o.port + 1000
	}
	if o.uiPort < 1 || o.uiPort > 65535 {
		return usagef("--ui-port %d: want 1-65535", o.uiPort)
	}
	if !o.headless && o.uiPort == o.port {
		return usagef("--ui-port %d: must differ from --port", o.uiPort)
	}
	for _, ns := range o.namespaces {
		if ns == "" || strings.ContainsAny(ns, " /") {
			return usagef("--namespace %q: not a valid namespace name", ns)
		}
	}
	switch o.logLevel {
	case "debug", "info", "warn", "error", "off":
	default:
		return usagef("--server-log-level %q: want debug, info, warn, error or off", o.logLevel)
	}
	return nil
}

func (a *app) runStartDev(ctx context.Context, o *startDevOptions) error {
	if a.deps.StartDevServer == nil {
		return errors.New("this build has no embedded server")
	}
	srv, err := a.deps.StartDevServer(ctx, devopts.Options{
		DBFilename: o.dbFilename, IP: o.ip, Port: o.port, UIPort: o.uiPort, EnableUI: !o.headless,
		Namespaces: o.namespaces, SearchAttributes: api.SearchAttributes(), LogLevel: o.logLevel,
	})
	if err != nil {
		return err
	}
	store := o.dbFilename
	if store == "" {
		store = "in memory (lost on exit; use --db-filename to keep it)"
	}
	info := map[string]any{
		"address": srv.FrontendHostPort(), "ui": srv.UIAddress(), "namespaces": append([]string{"default"}, o.namespaces...),
		"store": store, "ready_seconds": srv.StartupDuration().Seconds(),
	}
	if err := a.emit(info, func(w io.Writer) error {
		fmt.Fprintf(w, "Temporal server ready in %s\n", srv.StartupDuration().Round(time.Millisecond))
		fmt.Fprintf(w, "  frontend   %s\n", srv.FrontendHostPort())
		if srv.UIAddress() != "" {
			fmt.Fprintf(w, "  web ui     %s\n", srv.UIAddress())
		}
		fmt.Fprintf(w, "  namespaces %s\n", strings.Join(append([]string{"default"}, o.namespaces...), ", "))
		fmt.Fprintf(w, "  store      %s\n", store)
		fmt.Fprintf(w, "Stop with Ctrl-C.\n")
		return nil
	}); err != nil {
		_ = srv.Stop()
		return err
	}
	<-ctx.Done()
	fmt.Fprintln(a.deps.Stderr, "wdc: stopping the server")
	return srv.Stop()
}

package temporaltest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"
)

// EnvTools overrides where tools/build.sh's output is: a directory with
// bin/temporal-server, bin/temporal-sql-tool and schema/.
const EnvTools = "WDC_TEMPORAL_TOOLS"

// ErrNoBinaries: the official binaries are not built.
var ErrNoBinaries = errors.New("temporaltest: the official Temporal binaries are missing; build them with tools/build.sh (make temporal-tools; make test and .ci/run do)")

// Namespace is the namespace a test registers and wdc uses, as the
// temporalio/auto-setup image of docker-compose.yml does.
const Namespace = "default"

// ToolsDir is where the binaries are: $WDC_TEMPORAL_TOOLS, else
// ${XDG_CACHE_HOME:-$HOME/.cache}/wdc-tools/temporal (tools/build.sh's
// default). It wraps ErrNoBinaries when one is missing.
func ToolsDir() (string, error) {
	dir := os.Getenv(EnvTools)
	if dir == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", err
			}
			cache = filepath.Join(home, ".cache")
		}
		dir = filepath.Join(cache, "wdc-tools", "temporal")
	}
	for _, b := range []string{"temporal-server", "temporal-sql-tool"} {
		if _, err := os.Stat(filepath.Join(dir, "bin", b)); err != nil {
			return dir, fmt.Errorf("%w: no %s in %s/bin (%s overrides the directory)", ErrNoBinaries, b, dir, EnvTools)
		}
	}
	return dir, nil
}

// Config is one server's addresses. Ports are TCP ports below 32768
// (Temporal's SQL schema stores membership ports as smallint).
type Config struct {
	// PostgresPort is PostgreSQL's port on 127.0.0.1 (tools/postgres.sh
	// start DIR PORT).
	PostgresPort int
	// BindIP is the address every service binds to and advertises; ""
	// binds 127.0.0.1.
	BindIP string
	// Ports of frontend (gRPC, membership, HTTP), history, matching and
	// worker (gRPC, membership each).
	Frontend, FrontendMembership, FrontendHTTP int
	History, HistoryMembership                 int
	Matching, MatchingMembership               int
	Worker, WorkerMembership                   int
}

// Host is the address the services bind to and advertise.
func (c Config) Host() string {
	if c.BindIP == "" {
		return "127.0.0.1"
	}
	return c.BindIP
}

// Address is the frontend's host:port.
func (c Config) Address() string { return fmt.Sprintf("%s:%d", c.Host(), c.Frontend) }

// WriteRoot writes the server's --root directory: config/development.yaml
// (c) and config/dynamicconfig.yaml.
func WriteRoot(root string, c Config) error {
	dir := filepath.Join(root, "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	dyn := filepath.Join(dir, "dynamicconfig.yaml")
	if err := os.WriteFile(dyn, []byte(dynamicConfig), 0o644); err != nil {
		return err
	}
	var b strings.Builder
	if err := serverConfig.Execute(&b, struct {
		Config
		Bind, DynamicConfigFile string
	}{c, bindLine(c), dyn}); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "development.yaml"), []byte(b.String()), 0o644)
}

// ServerArgs are temporal-server's arguments to run on root.
func ServerArgs(root string) []string {
	return []string{"--root", root, "--config", "config", "--env", "development", "--allow-no-auth", "start"}
}

func bindLine(c Config) string {
	if c.BindIP == "" {
		return "bindOnLocalHost: true"
	}
	return "bindOnIP: " + c.BindIP
}

// serverConfig is temporal-server's config for PostgreSQL (after the
// server module's config/development-postgres12.yaml).
var serverConfig = template.Must(template.New("development.yaml").Parse(`log:
  stdout: true
  level: warn
persistence:
  defaultStore: postgres-default
  visibilityStore: postgres-visibility
  numHistoryShards: 4
  datastores:
    postgres-default:
      sql:
        pluginName: postgres12
        databaseName: temporal
        connectAddr: "127.0.0.1:{{.PostgresPort}}"
        connectProtocol: tcp
        user: temporal
        password: temporal
        maxConns: 20
        maxIdleConns: 20
        maxConnLifetime: 1h
    postgres-visibility:
      sql:
        pluginName: postgres12
        databaseName: temporal_visibility
        connectAddr: "127.0.0.1:{{.PostgresPort}}"
        connectProtocol: tcp
        user: temporal
        password: temporal
        maxConns: 10
        maxIdleConns: 10
        maxConnLifetime: 1h
global:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: {{.Host}}
services:
  frontend:
    rpc:
      grpcPort: {{.Frontend}}
      membershipPort: {{.FrontendMembership}}
      httpPort: {{.FrontendHTTP}}
      {{.Bind}}
  history:
    rpc:
      grpcPort: {{.History}}
      membershipPort: {{.HistoryMembership}}
      {{.Bind}}
  matching:
    rpc:
      grpcPort: {{.Matching}}
      membershipPort: {{.MatchingMembership}}
      {{.Bind}}
  worker:
    rpc:
      grpcPort: {{.Worker}}
      membershipPort: {{.WorkerMembership}}
      {{.Bind}}
clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: active
  currentClusterName: active
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: frontend
      rpcAddress: "{{.Address}}"
dcRedirectionPolicy:
  policy: noop
dynamicConfigClient:
  filepath: "{{.DynamicConfigFile}}"
  pollInterval: 10s
`))

// dynamicConfig: search attributes registered by `wdc control-plane
// --register-search-attributes` are usable at once (as on `wdc server
// start-dev`), and wdc's workflow IDs fit.
const dynamicConfig = `system.forceSearchAttributesCacheRefreshOnRead:
  - value: true
    constraints: {}
limit.maxIDLength:
  - value: 255
    constraints: {}
`

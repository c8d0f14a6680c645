package hosts

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	temporaltest "github.com/wdc-runtime/wdc/internal/testenv/temporal"
)

// postgresPort is PostgreSQL's port on a's loopback (the official server
// reaches it there; no other host does).
const postgresPort = 5432

// officialServer is PostgreSQL and the official temporal-server on a, as
// in production: tools/postgres.sh and tools/build.sh's binaries.
type officialServer struct {
	tools  string // tools/build.sh's directory
	script string // tools/postgres.sh
	pgDir  string
	root   string // temporal-server --root
	// server is the first temporal-server process (the soak's supervisor
	// starts the later ones).
	server *proc
}

// startOfficial starts PostgreSQL with Temporal's schema and the official
// temporal-server on a (every service on a's address; the frontend on
// serverPort), and registers the namespace wdc uses.
func (c *cluster) startOfficial(t *testing.T) {
	t.Helper()
	o := c.official
	var err error
	o.tools, err = temporaltest.ToolsDir()
	require.NoError(t, err)
	o.script, err = filepath.Abs(filepath.Join("..", "..", "tools", "postgres.sh"))
	require.NoError(t, err)
	// Under /tmp, not the test's directory: the postgres user (who runs
	// PostgreSQL for root) cannot enter that.
	o.pgDir, err = os.MkdirTemp("", "wdc-hosts-pg-")
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.a.commandOf(context.Background(), nil, o.script, "stop", o.pgDir).Run()
		_ = os.RemoveAll(o.pgDir)
	})
	began := time.Now()
	out, err := c.a.commandOf(context.Background(), o.env(), o.script, "start", o.pgDir, strconv.Itoa(postgresPort)).CombinedOutput()
	require.NoError(t, err, "PostgreSQL on host a (tools/postgres.sh start): %s", out)
	t.Logf("hosts: PostgreSQL with Temporal's schema on host a in %s", time.Since(began).Round(100*time.Millisecond))

	port := func(s string) int { n, _ := strconv.Atoi(s); return n }(serverPort)
	cfg := temporaltest.Config{PostgresPort: postgresPort, BindIP: c.a.addr,
		Frontend: port, FrontendMembership: 6933, FrontendHTTP: 7243, History: 7234, HistoryMembership: 6934,
		Matching: 7235, MatchingMembership: 6935, Worker: 7239, WorkerMembership: 6939}
	require.Equal(t, c.address, cfg.Address())
	o.root = filepath.Join(c.a.dir, "temporal")
	require.NoError(t, temporaltest.WriteRoot(o.root, cfg))
	srv, err := c.startTemporalOnce(t, "temporal-server")
	require.NoError(t, err)
	o.server = srv
	// What temporalio/auto-setup does after the schema.
	_, err = c.a.operator("register-namespace", temporaltest.Namespace)
	require.NoError(t, err)
	t.Logf("hosts: the official temporal-server on host a (%s) serving namespace %s after %s", c.address, temporaltest.Namespace,
		time.Since(began).Round(100*time.Millisecond))
}

// env is the environment tools/postgres.sh and temporal-server run with.
func (o *officialServer) env() []string {
	return []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", temporaltest.EnvTools + "=" + o.tools}
}

// startTemporalOnce starts temporal-server on a (name: its log files) and
// waits until its frontend answers a health check, for up to 2 minutes.
func (c *cluster) startTemporalOnce(t *testing.T, name string) (*proc, error) {
	o := c.official
	cmd := c.a.commandOf(context.Background(), o.env(), filepath.Join(o.tools, "bin", "temporal-server"), temporaltest.ServerArgs(o.root)...)
	cmd.Dir = o.root
	srv := c.a.startCmd(t, name, cmd)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := c.a.operator("health", temporaltest.Namespace)
		if err == nil {
			return srv, nil
		}
		select {
		case <-srv.exited:
			return srv, fmt.Errorf("temporal-server exited: %s", srv.tail())
		default:
		}
		if time.Now().After(deadline) {
			srv.stop()
			return srv, fmt.Errorf("temporal-server not serving within 2m (%v): %s", err, srv.tail())
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// restartPostgres stops PostgreSQL at once (a crash: it recovers on
// start) and starts it again after pause.
func (c *cluster) restartPostgres(pause time.Duration) error {
	o := c.official
	if out, err := c.a.commandOf(context.Background(), o.env(), o.script, "stop", o.pgDir).CombinedOutput(); err != nil {
		return fmt.Errorf("tools/postgres.sh stop: %w: %s", err, out)
	}
	time.Sleep(pause)
	if out, err := c.a.commandOf(context.Background(), o.env(), o.script, "restart", o.pgDir, strconv.Itoa(postgresPort)).CombinedOutput(); err != nil {
		return fmt.Errorf("tools/postgres.sh restart: %w: %s", err, out)
	}
	return nil
}

package hosts

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	temporaltest "github.com/wdc-runtime/wdc/internal/testenv/temporal"
)

// The official server's ports on a: PostgreSQL on a's loopback only (no
// other host reaches it), temporal-server's services on a's address (the
// frontend on serverPort).
const (
	postgresPort = 5432
	frontendPort = 7233
)

// officialServer is PostgreSQL and the official temporal-server on a, as
// in production: tools/postgres.sh and tools/build.sh's binaries.
type officialServer struct {
	tools string // tools/build.sh's directory
	pg    *temporaltest.Postgres
	root  string // temporal-server --root
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
	o.pg, err = temporaltest.NewPostgres(o.tools, postgresPort)
	require.NoError(t, err)
	o.pg.Command = func(name string, args ...string) *exec.Cmd {
		return exec.Command("ip", append([]string{"netns", "exec", c.a.ns, name}, args...)...)
	}
	t.Cleanup(func() { _ = o.pg.Remove() })
	began := time.Now()
	require.NoError(t, o.pg.Start(), "PostgreSQL on host a")
	t.Logf("hosts: PostgreSQL with Temporal's schema on host a in %s", time.Since(began).Round(100*time.Millisecond))

	cfg := temporaltest.Config{PostgresPort: postgresPort, BindIP: c.a.addr,
		Frontend: frontendPort, FrontendMembership: 6933, FrontendHTTP: 7243, History: 7234, HistoryMembership: 6934,
		Matching: 7235, MatchingMembership: 6935, Worker: 7239, WorkerMembership: 6939}
	require.Equal(t, c.address, cfg.Address())
	o.root = filepath.Join(c.a.dir, "temporal")
	require.NoError(t, temporaltest.WriteRoot(o.root, cfg))
	o.server, err = c.startTemporalOnce(t, "temporal-server")
	require.NoError(t, err)
	_, err = c.a.operator("register-namespace", temporaltest.Namespace)
	require.NoError(t, err)
	t.Logf("hosts: the official temporal-server on host a (%s) serving namespace %s after %s", c.address, temporaltest.Namespace,
		time.Since(began).Round(100*time.Millisecond))
}

// startTemporalOnce starts temporal-server on a (name: its log files) and
// waits until its frontend answers a health check, for up to 2 minutes.
func (c *cluster) startTemporalOnce(t *testing.T, name string) (*proc, error) {
	o := c.official
	cmd := c.a.commandOf(context.Background(), []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
		filepath.Join(o.tools, "bin", "temporal-server"), temporaltest.ServerArgs(o.root)...)
	cmd.Dir = o.root
	srv := c.a.startCmd(t, name, cmd)
	return srv, srv.waitReady("temporal-server", 500*time.Millisecond, func() error {
		_, err := c.a.operator("health", temporaltest.Namespace)
		return err
	})
}

// restartPostgres stops PostgreSQL at once (a crash: it recovers on
// start) and starts it again after pause, trying every second for half a
// minute. stopped reports whether the stop happened.
func (c *cluster) restartPostgres(pause time.Duration) (stopped bool, err error) {
	pg := c.official.pg
	if err := pg.Stop(); err != nil {
		return false, err
	}
	time.Sleep(pause)
	for try := 1; ; try++ {
		if err = pg.Restart(); err == nil || try == 30 {
			return true, err
		}
		time.Sleep(time.Second)
	}
}

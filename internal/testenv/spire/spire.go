package spiretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// EnvTools overrides where the binaries are: a directory with
// bin/spire-server and bin/spire-agent.
const EnvTools = "WDC_SPIRE_TOOLS"

// ErrNoBinaries: the SPIRE binaries are not built.
var ErrNoBinaries = errors.New("spiretest: the SPIRE binaries are missing; build them with tools/spire/build.sh (make spire-tools)")

// ToolsDir is $WDC_SPIRE_TOOLS, else ${XDG_CACHE_HOME:-$HOME/.cache}/wdc-tools/spire.
func ToolsDir() string {
	if d := os.Getenv(EnvTools); d != "" {
		return d
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "wdc-tools", "spire")
}

// SPIRE is a running server and agent of one trust domain.
type SPIRE struct {
	TrustDomain string
	dir         string
	server      string // spire-server binary
	serverSock  string
	agentSock   string
	node        string // the agent's SPIFFE ID
	procs       []*exec.Cmd
}

// Start runs a SPIRE server on a free loopback port and one agent
// attested to it with a join token, all under dir, and waits (at most
// until ctx ends) until both answer their health checks. Stop ends them.
func Start(ctx context.Context, dir, trustDomain string) (*SPIRE, error) {
	bin := filepath.Join(ToolsDir(), "bin")
	server, agent := filepath.Join(bin, "spire-server"), filepath.Join(bin, "spire-agent")
	for _, p := range []string{server, agent} {
		if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("%w (no executable %s)", ErrNoBinaries, p)
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &SPIRE{TrustDomain: trustDomain, dir: dir, server: server,
		serverSock: filepath.Join(dir, "server.sock"), agentSock: filepath.Join(dir, "agent.sock"),
		node: "spiffe://" + trustDomain + "/node/test-host"}
	serverConf := fmt.Sprintf(`server {
  bind_address = "127.0.0.1"
  bind_port = "%d"
  socket_path = %q
  trust_domain = %q
  data_dir = %q
  log_level = "WARN"
}
plugins {
  DataStore "sql" {
    plugin_data {
      database_type = "sqlite3"
      connection_string = %q
    }
  }
  NodeAttestor "join_token" {
    plugin_data {}
  }
  KeyManager "memory" {
    plugin_data {}
  }
}
`, port, s.serverSock, trustDomain, filepath.Join(dir, "server-data"), filepath.Join(dir, "server-data", "datastore.sqlite3"))
	agentConf := fmt.Sprintf(`agent {
  data_dir = %q
  log_level = "WARN"
  server_address = "127.0.0.1"
  server_port = "%d"
  socket_path = %q
  trust_domain = %q
  insecure_bootstrap = true
}
plugins {
  NodeAttestor "join_token" {
    plugin_data {}
  }
  KeyManager "memory" {
    plugin_data {}
  }
  WorkloadAttestor "unix" {
    plugin_data {}
  }
}
`, filepath.Join(dir, "agent-data"), port, s.agentSock, trustDomain)
	if err := os.WriteFile(filepath.Join(dir, "server.conf"), []byte(serverConf), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "agent.conf"), []byte(agentConf), 0o600); err != nil {
		return nil, err
	}
	if err := s.spawn(server, "server.log", "run", "-config", filepath.Join(dir, "server.conf")); err != nil {
		return nil, err
	}
	if err := s.wait(ctx, server, "healthcheck", "-socketPath", s.serverSock); err != nil {
		s.Stop()
		return nil, fmt.Errorf("spire-server did not become healthy: %w (log: %s)", err, s.log("server.log"))
	}
	out, err := s.serverCmd(ctx, "token", "generate", "-spiffeID", s.node, "-ttl", "600")
	if err != nil {
		s.Stop()
		return nil, err
	}
	token := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out), "Token:"))
	if err := s.spawn(agent, "agent.log", "run", "-config", filepath.Join(dir, "agent.conf"), "-joinToken", token); err != nil {
		s.Stop()
		return nil, err
	}
	if err := s.wait(ctx, agent, "healthcheck", "-socketPath", s.agentSock); err != nil {
		s.Stop()
		return nil, fmt.Errorf("spire-agent did not become healthy: %w (log: %s)", err, s.log("agent.log"))
	}
	return s, nil
}

// AgentSocket is the agent's Workload API socket (a path).
func (s *SPIRE) AgentSocket() string { return s.agentSock }

// RegisterWorkload registers spiffeID for the processes of uid on the
// agent's node (selector unix:uid:<uid>).
func (s *SPIRE) RegisterWorkload(ctx context.Context, spiffeID string, uid int) error {
	_, err := s.serverCmd(ctx, "entry", "create", "-parentID", s.node, "-spiffeID", spiffeID, "-selector", "unix:uid:"+strconv.Itoa(uid), "-x509SVIDTTL", "600")
	return err
}

// Stop kills the agent and the server.
func (s *SPIRE) Stop() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		p := s.procs[i]
		_ = p.Process.Kill()
		_ = p.Wait()
	}
	s.procs = nil
}

func (s *SPIRE) serverCmd(ctx context.Context, args ...string) (string, error) {
	args = append(args, "-socketPath", s.serverSock)
	out, err := exec.CommandContext(ctx, s.server, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("spire-server %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

func (s *SPIRE) spawn(bin, logName string, args ...string) error {
	log, err := os.Create(filepath.Join(s.dir, logName))
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return err
	}
	s.procs = append(s.procs, cmd)
	return nil
}

// wait runs bin args until it succeeds or ctx ends.
func (s *SPIRE) wait(ctx context.Context, bin string, args ...string) error {
	var last error
	for {
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		if err == nil {
			return nil
		}
		last = fmt.Errorf("%w: %s", err, bytes.TrimSpace(out))
		select {
		case <-ctx.Done():
			return last
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (s *SPIRE) log(name string) string {
	b, _ := os.ReadFile(filepath.Join(s.dir, name))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

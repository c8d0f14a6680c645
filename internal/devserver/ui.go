package devserver

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	uiserver "github.com/temporalio/ui-server/v2/server"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	"github.com/temporalio/ui-server/v2/server/server_options"

	"github.com/wdc-runtime/wdc/internal/devopts"
)

// uiServer is the Temporal Web UI served in-process.
type uiServer struct {
	srv *uiserver.Server
}

// staticUIConfig serves one fixed configuration to the UI server.
type staticUIConfig struct{ cfg *uiconfig.Config }

func (s staticUIConfig) GetConfig() (*uiconfig.Config, error) { return s.cfg, nil }

// startUI serves the Web UI on ip:port for the frontend at grpcAddr and
// returns once it answers HTTP.
func startUI(ip string, port int, grpcAddr string, tlsOpts *devopts.TLSOptions) (*uiServer, error) {
	cfg := &uiconfig.Config{
		Host:                ip,
		Port:                port,
		TemporalGRPCAddress: grpcAddr,
		EnableUI:            true,
		DefaultNamespace:    DefaultNamespace,
		HideLogs:            true,
		DisableNewsFetch:    true,
		CORS:                uiconfig.CORS{CookieInsecure: true},
	}
	if tlsOpts != nil {
		// The UI reaches the frontend as a client with the server's own
		// certificate.
		cfg.TLS = uiconfig.TLS{CaFile: tlsOpts.CAFile, CertFile: tlsOpts.CertFile, KeyFile: tlsOpts.KeyFile, EnableHostVerification: true}
	}
	srv := uiserver.NewServer(server_options.WithConfigProvider(staticUIConfig{cfg}))
	go func() { _ = srv.Start() }()
	addr := net.JoinHostPort(ip, strconv.Itoa(port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			return &uiServer{srv: srv}, nil
		}
		if time.Now().After(deadline) {
			srv.Stop()
			return nil, fmt.Errorf("web ui on %s did not answer: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (u *uiServer) stop() { u.srv.Stop() }

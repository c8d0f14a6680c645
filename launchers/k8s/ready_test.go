package k8s

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Ready is the API server's /readyz: nil when it answers 200, its answer
// when not, and the cause, at once, when nothing listens.
func TestReadyNamesTheServersAnswerOrWhyItCannotBeReached(t *testing.T) {
	var unhealthy atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		if unhealthy.Load() {
			http.Error(w, "[-]etcd failed: reason withheld", http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	client := func(host string) kubernetes.Interface {
		cs, err := kubernetes.NewForConfig(&rest.Config{Host: host})
		require.NoError(t, err)
		return cs
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, Ready(ctx, client(srv.URL)))

	unhealthy.Store(true)
	err := Ready(ctx, client(srv.URL))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "kubernetes API server")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close())
	began := time.Now()
	err = Ready(ctx, client(closed))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "connection refused")
	assert.Less(t, time.Since(began), 5*time.Second, "said at once, not after the caller's deadline")
}

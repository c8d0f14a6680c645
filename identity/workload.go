package identity

import (
	"context"
	"fmt"
	"strings"

	"github.com/spiffe/go-spiffe/v2/workloadapi"
)

// EnvSocket is the SPIFFE standard's variable for the Workload API's
// address (unix:///path or a bare path).
const EnvSocket = "SPIFFE_ENDPOINT_SOCKET"

// OpenWorkloadAPI connects to a SPIRE agent's Workload API at socket (a
// path or unix:// address) and waits, at most until ctx ends, for this
// process's first X.509-SVID and bundle. The source keeps both current
// (rotation) until Close. It is both a Signer's source (NewSignerFrom) and
// a Verifier's Bundle.
func OpenWorkloadAPI(ctx context.Context, socket string) (*workloadapi.X509Source, error) {
	addr := socket
	if !strings.Contains(addr, "://") {
		addr = "unix://" + addr
	}
	src, err := workloadapi.NewX509Source(ctx, workloadapi.WithClientOptions(workloadapi.WithAddr(addr)))
	if err != nil {
		return nil, fmt.Errorf("workload API at %s: %w", addr, err)
	}
	return src, nil
}

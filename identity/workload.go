package identity

import (
	"context"
	"fmt"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"github.com/spiffe/go-spiffe/v2/workloadapi"
)

// EnvSocket is the SPIFFE standard's variable for the Workload API's
// address (unix:///path or a bare path).
const EnvSocket = "SPIFFE_ENDPOINT_SOCKET"

// OpenWorkloadAPI connects to a SPIRE agent's Workload API at socket (a
// path or unix:// address) and waits, at most until ctx ends, for this
// process's first X.509-SVID and bundle. The source keeps both current
// (rotation) until Close. It is both a Signer's source (NewSignerFrom) and
// a Verifier's Bundle. When SPIRE hands the process several SVIDs (several
// registration entries select it), the source's is the first for which
// pick is true (nil, or none: the first of all).
func OpenWorkloadAPI(ctx context.Context, socket string, pick func(spiffeid.ID) bool) (*workloadapi.X509Source, error) {
	addr := socket
	if !strings.Contains(addr, "://") {
		addr = "unix://" + addr
	}
	opts := []workloadapi.X509SourceOption{workloadapi.WithClientOptions(workloadapi.WithAddr(addr))}
	if pick != nil {
		opts = append(opts, workloadapi.WithDefaultX509SVIDPicker(func(svids []*x509svid.SVID) *x509svid.SVID {
			for _, s := range svids {
				if pick(s.ID) {
					return s
				}
			}
			return svids[0]
		}))
	}
	src, err := workloadapi.NewX509Source(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("workload API at %s: %w", addr, err)
	}
	return src, nil
}

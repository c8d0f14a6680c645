package testsuite

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/identity"
	spiretest "github.com/wdc-runtime/wdc/internal/testenv/spire"
	"github.com/wdc-runtime/wdc/lease"
	"github.com/wdc-runtime/wdc/resource"
	"github.com/wdc-runtime/wdc/worker"
)

// nsSPIRE is the namespace of TestSPIREIdentity: its control plane takes
// its trust bundle from a real SPIRE agent's Workload API.
const nsSPIRE = "wdc-spire"

// Issue #20, item 1: identities from a real SPIRE server and agent
// (tools/spire/build.sh), with join-token node attestation and unix
// workload attestation. The agent's SVID and the control plane's bundle
// both come from the SPIRE agent's Workload API, in trust domain
// wdc.test: the agent registers and its attempt's signed result is
// accepted; a registration for its worker ID without its key is refused.
func TestSPIREIdentity(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const td = "wdc.test"
	sp, err := spiretest.Start(ctx, t.TempDir(), td)
	require.NoError(t, err)
	t.Cleanup(sp.Stop)
	require.NoError(t, sp.RegisterWorkload(ctx, "spiffe://"+td+"/wdc/worker/spire-a", os.Getuid()))
	require.NoError(t, sp.RegisterWorkload(ctx, "spiffe://"+td+"/wdc/submitter/spire-sub", os.Getuid()))

	// This test process is the workload: both entries select its uid, so
	// SPIRE hands it two SVIDs, and each source picks its own.
	open := func(pick func(spiffeid.ID) bool, want string) (*identity.Signer, x509bundle.Source) {
		src, err := identity.OpenWorkloadAPI(ctx, sp.AgentSocket(), pick)
		require.NoError(t, err)
		t.Cleanup(func() { src.Close() })
		signer := identity.NewSignerFrom(src)
		waitFor(t, 30*time.Second, want+" from the Workload API", func() bool { return signer.ID().String() == want })
		return signer, src
	}
	signer, src := open(func(id spiffeid.ID) bool { w, ok := identity.WorkerOf(id); return ok && w == "spire-a" }, "spiffe://wdc.test/wdc/worker/spire-a")
	submitter, _ := open(func(id spiffeid.ID) bool { _, ok := identity.SubmitterOf(id); return ok }, "spiffe://wdc.test/wdc/submitter/spire-sub")

	v, err := identity.NewVerifier(identity.ModeRequired, spiffeid.RequireTrustDomainFromString(td), src)
	require.NoError(t, err)
	c := dialNamespace(t, nsSPIRE)
	cp := worker.NewControlPlaneWith(c, suite.blobs, worker.ControlPlaneOptions{Identity: v})
	require.NoError(t, cp.Start())
	t.Cleanup(cp.Stop)
	wc := &wdcclient.Client{C: c, Signer: submitter}

	_, err = wc.RegisterWorker(ctx, fleet.Registration{WorkerID: "spire-a", Capacity: resource.List{CPUMillis: 1000, MemoryBytes: 1 << 30}})
	requireRefused(t, err, lease.RejectUnauthenticated)

	startAgentOn(t, c, "spire-a", func(o *worker.AgentOptions) { o.Identity = signer })
	wv, err := wc.Worker(ctx, "spire-a")
	require.NoError(t, err)
	require.Equal(t, "spiffe://wdc.test/wdc/worker/spire-a", wv.Identity)

	env := envelope.Envelope{TaskID: "spire-task", RunID: "spire-run", WorldID: "identity",
		Command:  []string{"/bin/sh", "-c", "echo from-spire > outputs/out.txt"},
		Env:      map[string]string{"PATH": "/usr/bin:/bin"},
		Selector: map[string]string{"suite-test": testLabel(t)}}
	_, err = wc.SubmitTask(ctx, env, api.TaskOptions{LeaseTTL: time.Minute})
	require.NoError(t, err)
	out, err := waitTaskIn(t, wc, env.TaskID)
	require.NoError(t, err)
	require.Equal(t, api.TaskCompleted, out.State)
	view, err := wc.Task(ctx, env.TaskID)
	require.NoError(t, err)
	require.Equal(t, "spire-a", view.Result.WorkerID)
}

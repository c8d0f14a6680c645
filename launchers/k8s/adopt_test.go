package k8s

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/internal/executor"
	kubetest "github.com/wdc-runtime/wdc/internal/testenv/kube"
	"github.com/wdc-runtime/wdc/launchers"
	"github.com/wdc-runtime/wdc/lease"
)

// leaseControl answers lease queries from a map of current leases; the
// rest of executor.Control is unused by Adoptable.
type leaseControl struct {
	executor.Control
	leases map[string]lease.Lease
}

func (c leaseControl) Lease(_ context.Context, taskID string) (api.TaskView, error) {
	l, ok := c.leases[taskID]
	if !ok {
		return api.TaskView{}, executor.ErrTaskGone
	}
	return api.TaskView{TaskID: taskID, Lease: &l}, nil
}

// A launcher started after another one (the agent restarted) finds the
// worker's running Jobs: one whose lease is current is adoptable and
// followed once adopted; one whose lease moved on is deleted; a refused
// adoption deletes its Job.
func TestAdoptableJobsAfterARestart(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	client.PrependReactor("create", "jobs", func(action k8stesting.Action) (bool, runtime.Object, error) {
		job := action.(k8stesting.CreateAction).GetObject().(*batchv1.Job)
		job.UID = types.UID("uid-" + job.Name)
		return false, nil, nil
	})
	blobs, err := blobstore.OpenDir(ctx, t.TempDir())
	require.NoError(t, err)
	opts := Options{WorkerID: "k8s-pool", Client: client, Spec: testSpec(), Apply: true, Blobs: blobs, Reporter: &kubetest.Reports{}}
	first, err := New(ctx, opts)
	require.NoError(t, err)
	keep := testAttempt(t, nil)
	stale := testAttempt(t, func(e *envelope.Envelope) { e.TaskID = "stale-1" })
	refused := testAttempt(t, func(e *envelope.Envelope) { e.TaskID = "refused-1" })
	for _, a := range []launchers.Attempt{keep, stale, refused} {
		_, err := first.Submit(ctx, a)
		require.NoError(t, err)
	}
	first.Shutdown(ctx, "agent killed")

	moved := stale.Lease
	moved.Fence++
	opts.Control = leaseControl{leases: map[string]lease.Lease{keep.Lease.TaskID: keep.Lease, "stale-1": moved, "refused-1": refused.Lease}}
	second, err := New(ctx, opts)
	require.NoError(t, err)
	defer second.Shutdown(ctx, "test")
	claims, err := second.Adoptable(ctx)
	require.NoError(t, err)
	assert.ElementsMatch(t, []lease.Claim{keep.Claim(), refused.Claim()}, claims)
	_, err = client.BatchV1().Jobs("wdc-jobs").Get(ctx, JobName(stale.Claim()), metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the Job whose lease moved on is deleted: %v", err)

	assert.Equal(t, 0, second.Running())
	second.Adopt(ctx, []lease.Claim{keep.Claim()}, []lease.Claim{refused.Claim()})
	assert.Equal(t, 1, second.Running(), "the adopted attempt is followed")
	_, err = client.BatchV1().Jobs("wdc-jobs").Get(ctx, JobName(refused.Claim()), metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "a refused adoption's Job is deleted: %v", err)
	_, err = client.BatchV1().Jobs("wdc-jobs").Get(ctx, JobName(keep.Claim()), metav1.GetOptions{})
	require.NoError(t, err, "the adopted Job runs on")
	require.NoError(t, second.RenewLease(ctx, keep.Claim()), "its Lease is renewed again")
	require.NoError(t, second.Cancel(ctx, keep.Claim(), "lease ended"))
	assert.Equal(t, 0, second.Running())
}

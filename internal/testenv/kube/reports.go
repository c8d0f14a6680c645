package kubetest

import (
	"context"
	"sync"

	"github.com/wdc-runtime/wdc/api"
)

// Reports records attempt-failed reports (a launchers/k8s Reporter for
// tests that run a launcher in-process).
type Reports struct {
	mu  sync.Mutex
	got []api.AttemptFailedSignal
}

// ReportFailure records f.
func (r *Reports) ReportFailure(_ context.Context, f api.AttemptFailedSignal) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, f)
	return nil
}

// Got returns the reports so far, oldest first.
func (r *Reports) Got() []api.AttemptFailedSignal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]api.AttemptFailedSignal{}, r.got...)
}

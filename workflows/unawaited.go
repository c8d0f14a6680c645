package workflows

import "go.temporal.io/sdk/workflow"

// unawaited holds the commands a task issued without awaiting them where
// it issued them (the cancel of an ended attempt, reservation releases).
// The task does not continue as new before all are done, so none is
// dropped, and does not end before its releases are (a best-effort cancel
// is not awaited then: the attempt's own lease check stops it once the
// task has ended).
type unawaited struct {
	all []workflow.Future
	// releases are the release signals among all.
	releases []workflow.Future
}

// add holds f until it completes.
func (u *unawaited) add(f workflow.Future) { u.all = append(u.all, f) }

// addRelease holds release signal f until it is delivered.
func (u *unawaited) addRelease(f workflow.Future) {
	u.add(f)
	u.releases = append(u.releases, f)
}

// done reports whether every held command has completed, forgetting
// those that have.
func (u *unawaited) done() bool {
	u.all = pending(u.all)
	return len(u.all) == 0
}

// releasesDone reports whether every release signal was delivered (or
// failed: the worker's entry is gone).
func (u *unawaited) releasesDone() bool {
	u.releases = pending(u.releases)
	return len(u.releases) == 0
}

// pending keeps the futures that are not ready yet.
func pending(fs []workflow.Future) []workflow.Future {
	n := 0
	for _, f := range fs {
		if !f.IsReady() {
			fs[n] = f
			n++
		}
	}
	return fs[:n]
}

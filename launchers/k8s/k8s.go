package k8s

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/internal/executor"
	"github.com/wdc-runtime/wdc/internal/logrepeat"
	"github.com/wdc-runtime/wdc/launchers"
	"github.com/wdc-runtime/wdc/launchers/external"
	"github.com/wdc-runtime/wdc/lease"
)

// ErrWritesDisabled: the launcher was not allowed to write to the cluster.
var ErrWritesDisabled = errors.New("k8s launcher: cluster writes are off; nothing was created (opt in with `wdc agent --k8s-apply`, after checking `wdc workers render-launch --launcher k8s ENVELOPE`)")

// ErrLeaseTaken: the attempt's Lease names another holder; the launcher
// stops renewing it rather than overwrite it.
var ErrLeaseTaken = errors.New("k8s launcher: the Lease is held by someone else")

// DefaultPendingBound is how long a pod may stay unscheduled or in
// image-pull back-off before its attempt ends launch_failed.
const DefaultPendingBound = 2 * time.Minute

// Reporter reports an attempt that ended without a result
// (executor.Control has it: the attempt-failed signal).
type Reporter interface {
	ReportFailure(ctx context.Context, f api.AttemptFailedSignal) error
}

// Options configures a Launcher.
type Options struct {
	// WorkerID is the fleet worker this launcher runs attempts for.
	WorkerID string
	// Client reaches the cluster. Required.
	Client kubernetes.Interface
	// Spec is what every Job shares (namespace, image, executor target).
	Spec Spec
	// Apply allows cluster writes; without it Submit fails with
	// ErrWritesDisabled and Cancel deletes nothing.
	Apply bool
	// Blobs is the artifact store `wdc exec` reads the sealed envelope
	// from (Submit stores it there). Required.
	Blobs *blobstore.Store
	// Reporter receives launch_failed and infra_killed reports. Required.
	Reporter Reporter
	// Control answers the lease queries of Adoptable (executor.CheckLease);
	// nil: a restarted agent adopts nothing.
	Control executor.Control
	// PendingBound is how long a pod may stay unscheduled or unable to
	// pull its image (default DefaultPendingBound).
	PendingBound time.Duration
	Logger       *slog.Logger
	// Signer, when set, is the worker's identity: each attempt's pod
	// signs with a key delegated to that attempt alone, handed over in a
	// Secret the Job owns (Spec.AttemptKeys, RenderKeySecret), and the
	// launcher signs its reports (launch_failed, infra_killed) likewise.
	Signer *identity.Signer
}

// Launcher runs attempts as Jobs in one namespace.
type Launcher struct {
	opts    Options
	factory informers.SharedInformerFactory
	jobs    batchlisters.JobLister
	pods    corelisters.PodLister
	stop    chan struct{}

	mu       sync.Mutex
	attempts map[string]*attempt // by Job name
	closed   bool
}

// attempt is one launched attempt this launcher follows.
type attempt struct {
	claim    lease.Claim
	jobUID   types.UID
	lease    *coordinationv1.Lease // last written or read
	cancel   context.CancelFunc    // stops the Lease renewals
	timer    *time.Timer           // re-examines a pending pod at its bound
	reported bool
	finished bool
}

var _ launchers.Launcher = (*Launcher)(nil)

// New returns a Launcher and starts its informers on the worker's Jobs and
// pods (label selector managed-by=wdc, worker=<worker>), waiting for their
// first list until ctx is done. Errors: a missing field; the lists did
// not complete (API server unreachable, RBAC).
func New(ctx context.Context, opts Options) (*Launcher, error) {
	switch {
	case opts.WorkerID == "":
		return nil, errors.New("k8s launcher: worker ID is required")
	case opts.Client == nil:
		return nil, errors.New("k8s launcher: a Kubernetes client is required")
	case opts.Spec.Namespace == "":
		return nil, errors.New("k8s launcher: namespace is required")
	case opts.Blobs == nil:
		return nil, errors.New("k8s launcher: blob store is required")
	case opts.Reporter == nil:
		return nil, errors.New("k8s launcher: a reporter is required")
	}
	if opts.PendingBound <= 0 {
		opts.PendingBound = DefaultPendingBound
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.Spec.AttemptKeys = opts.Signer != nil
	selector := labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedByValue, LabelWorker: LabelValue(opts.WorkerID)}).String()
	f := informers.NewSharedInformerFactoryWithOptions(opts.Client, 0, informers.WithNamespace(opts.Spec.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	l := &Launcher{opts: opts, factory: f, stop: make(chan struct{}), attempts: map[string]*attempt{}}
	jobInf, podInf := f.Batch().V1().Jobs(), f.Core().V1().Pods()
	l.jobs, l.pods = jobInf.Lister(), podInf.Lister()
	if _, err := jobInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { l.onJob(o, false) },
		UpdateFunc: func(_, o any) { l.onJob(o, false) },
		DeleteFunc: func(o any) { l.onJob(o, true) },
	}); err != nil {
		return nil, err
	}
	if _, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { l.onPod(o) },
		UpdateFunc: func(_, o any) { l.onPod(o) },
	}); err != nil {
		return nil, err
	}
	f.Start(l.stop)
	synced := make(chan struct{})
	go func() {
		defer close(synced)
		f.WaitForCacheSync(l.stop)
	}()
	select {
	case <-synced:
	case <-ctx.Done():
		close(l.stop)
		return nil, fmt.Errorf("k8s launcher: listing Jobs and pods in namespace %s: %w (is the API server reachable, and may this identity list jobs and pods there?)", opts.Spec.Namespace, ctx.Err())
	}
	for typ, ok := range f.WaitForCacheSync(l.stop) {
		if !ok {
			return nil, fmt.Errorf("k8s launcher: the %v informer did not sync", typ)
		}
	}
	return l, nil
}

// Submit creates the attempt's Job, with a Signer its key Secret, and its
// Lease, and returns
// "k8s:<namespace>/jobs/<name>" as the Submission's TaskDir. Submitting
// an attempt whose Job exists already (the same task, attempt and fence:
// a retried launch) reads that Job instead of failing.
//
// Errors (a launch_failed retry; nothing is created): writes are off
// (ErrWritesDisabled); the attempt is for another worker; ctx is done or
// past its deadline (launchers.ErrLaunchExpired); the envelope's digest is
// not the lease's; an envelope value the agent's allowlists do not hold
// (*NotAllowedError: its image, a toleration, its priority or runtime
// class); no image; a named RuntimeClass, PriorityClass or the
// task PVC does not exist (named in the error); the API server refused
// the Job, or the key Secret (a Job this call created is then deleted; one
// an earlier launch of the attempt created is left running).
func (l *Launcher) Submit(ctx context.Context, a launchers.Attempt) (launchers.Submission, error) {
	if !l.opts.Apply {
		return launchers.Submission{}, ErrWritesDisabled
	}
	c, err := launchers.Accept(ctx, l.opts.WorkerID, a)
	if err != nil {
		return launchers.Submission{}, err
	}
	job, lz, err := Render(l.opts.Spec, a, time.Now())
	if err != nil {
		return launchers.Submission{}, err
	}
	if err := l.Preflight(ctx, job); err != nil {
		return launchers.Submission{}, err
	}
	if err := launchers.StoreEnvelope(ctx, l.opts.Blobs, a); err != nil {
		return launchers.Submission{}, err
	}
	ns := l.opts.Spec.Namespace
	jobs := l.opts.Client.BatchV1().Jobs(ns)
	created, err := jobs.Create(ctx, job, metav1.CreateOptions{})
	createdHere := err == nil
	if apierrors.IsAlreadyExists(err) {
		created, err = jobs.Get(ctx, job.Name, metav1.GetOptions{})
		if err == nil && created.Annotations[AnnotationPrefix+"fence"] != strconv.FormatInt(c.Fence, 10) {
			err = fmt.Errorf("job %s/%s exists for another attempt (fence %s)", ns, job.Name, created.Annotations[AnnotationPrefix+"fence"])
		}
	}
	if err != nil {
		return launchers.Submission{}, fmt.Errorf("create job %s/%s: %w", ns, job.Name, err)
	}
	if err := l.createKeySecret(ctx, a, created); err != nil {
		// The pod of a Job created here would wait for the Secret for
		// ever; a Job an earlier launch created has its Secret and runs.
		if createdHere {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			derr := jobs.Delete(dctx, created.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
				Preconditions: &metav1.Preconditions{UID: &created.UID}})
			cancel()
			if derr != nil && !apierrors.IsNotFound(derr) {
				l.opts.Logger.Warn("could not delete a Job whose key Secret failed", "job", ns+"/"+created.Name, "error", derr)
			}
		}
		return launchers.Submission{}, err
	}
	lz.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: created.Name, UID: created.UID}}
	leases := l.opts.Client.CoordinationV1().Leases(ns)
	gotLease, err := leases.Create(ctx, lz, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		gotLease, err = leases.Get(ctx, lz.Name, metav1.GetOptions{})
	}
	if err != nil {
		// The Job runs without its Lease: the Lease is for people and
		// tools watching the cluster, the fence is what fences.
		l.opts.Logger.Warn("could not create the attempt's Lease", "lease", ns+"/"+lz.Name, "error", err)
		gotLease = nil
	}
	l.track(c, created.UID, gotLease, a.Lease.TTL)
	l.opts.Logger.Info("attempt launched as a Job", "task", c.TaskID, "attempt", c.Attempt, "fence", c.Fence, "job", ns+"/"+created.Name, "uid", created.UID)
	// Pods may have been seen before the attempt was tracked.
	if pods, err := l.pods.List(labels.SelectorFromSet(labels.Set{LabelLease: LabelValue(created.Name)})); err == nil {
		for _, p := range pods {
			l.onPod(p)
		}
	}
	return launchers.Submission{TaskDir: "k8s:" + ns + "/jobs/" + created.Name}, nil
}

// createKeySecret delegates a key to attempt a and creates the Secret that
// hands it to the attempt's pod, owned by its Job; nothing without a
// Signer. A Secret that exists already (a retried launch) is kept: its key
// is for the same attempt.
func (l *Launcher) createKeySecret(ctx context.Context, a launchers.Attempt, job *batchv1.Job) error {
	if l.opts.Signer == nil {
		return nil
	}
	key, err := external.AttemptKey(l.opts.Signer, a.Claim())
	if err != nil {
		return err
	}
	secret, err := RenderKeySecret(l.opts.Spec, a, key, job)
	if err != nil {
		return err
	}
	_, err = l.opts.Client.CoreV1().Secrets(secret.Namespace).Create(ctx, secret, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create secret %s/%s (the attempt's key): %w", secret.Namespace, secret.Name, err)
	}
	return nil
}

// Preflight checks that the cluster objects job names exist: its
// RuntimeClass, PriorityClass and PersistentVolumeClaims. The API server
// accepts a Job naming a missing one, and its pod would never start.
// Errors name the field and the object; a failed read is an error too.
func (l *Launcher) Preflight(ctx context.Context, job *batchv1.Job) error {
	pod := job.Spec.Template.Spec
	check := func(field, kind, name string, get func() error) error {
		err := get()
		switch {
		case err == nil:
			return nil
		case apierrors.IsNotFound(err):
			return fmt.Errorf("%s %q: no such %s in the cluster; the Job would be accepted but its pod never start", field, name, kind)
		default:
			return fmt.Errorf("%s %q: could not read the %s: %w", field, name, kind, err)
		}
	}
	if rc := pod.RuntimeClassName; rc != nil && *rc != "" {
		if err := check("runtimeClassName", "RuntimeClass", *rc, func() error {
			_, err := l.opts.Client.NodeV1().RuntimeClasses().Get(ctx, *rc, metav1.GetOptions{})
			return err
		}); err != nil {
			return err
		}
	}
	if pc := pod.PriorityClassName; pc != "" {
		if err := check("priorityClassName", "PriorityClass", pc, func() error {
			_, err := l.opts.Client.SchedulingV1().PriorityClasses().Get(ctx, pc, metav1.GetOptions{})
			return err
		}); err != nil {
			return err
		}
	}
	for _, v := range pod.Volumes {
		if pvc := v.PersistentVolumeClaim; pvc != nil {
			if err := check("persistentVolumeClaim", "PersistentVolumeClaim in namespace "+job.Namespace, pvc.ClaimName, func() error {
				_, err := l.opts.Client.CoreV1().PersistentVolumeClaims(job.Namespace).Get(ctx, pvc.ClaimName, metav1.GetOptions{})
				return err
			}); err != nil {
				return err
			}
		}
	}
	return nil
}

// track starts following an attempt: its Lease is renewed every third
// of ttl until the Job finishes or is cancelled.
func (l *Launcher) track(c lease.Claim, uid types.UID, lz *coordinationv1.Lease, ttl time.Duration) {
	name := JobName(c)
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.attempts[name]; ok || l.closed {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	at := &attempt{claim: c, jobUID: uid, lease: lz, cancel: cancel}
	l.attempts[name] = at
	if lz == nil {
		return
	}
	every := ttl / 3
	if every <= 0 {
		every = time.Second
	}
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		renewLog := &logrepeat.Failure{Log: l.opts.Logger.With("lease", l.opts.Spec.Namespace+"/"+name), Msg: "lease renewal", Recovered: "lease renewed again"}
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := l.RenewLease(ctx, c); err != nil && ctx.Err() == nil {
				renewLog.Fail(err)
				if errors.Is(err, ErrLeaseTaken) || apierrors.IsNotFound(err) {
					return // someone else's now, or deleted: nothing to renew
				}
			} else if err == nil {
				renewLog.OK()
			}
		}
	}()
}

// RenewLease sets the renew time of claim c's Lease, as an update
// conditional on the resourceVersion last seen. A 409 Conflict (the Lease
// changed since) is answered by reading it again and, when it still names
// this attempt as holder, renewing that version: a change made by someone
// else is kept, never overwritten. Errors: ErrLeaseTaken when another
// holder is named; ErrUnknownAttempt when the attempt is not followed or
// has no Lease; the API server's errors.
func (l *Launcher) RenewLease(ctx context.Context, c lease.Claim) error {
	name := JobName(c)
	l.mu.Lock()
	at, ok := l.attempts[name]
	var cur *coordinationv1.Lease
	if ok && at.lease != nil {
		cur = at.lease.DeepCopy()
	}
	l.mu.Unlock()
	if cur == nil {
		return launchers.ErrUnknownAttempt
	}
	leases := l.opts.Client.CoordinationV1().Leases(l.opts.Spec.Namespace)
	for range 3 {
		if h := cur.Spec.HolderIdentity; h == nil || *h != HolderIdentity(c) {
			return fmt.Errorf("%w: %s names %q", ErrLeaseTaken, name, ptr.Deref(h, ""))
		}
		now := metav1.NewMicroTime(time.Now().UTC().Truncate(time.Microsecond))
		cur.Spec.RenewTime = &now
		got, err := leases.Update(ctx, cur, metav1.UpdateOptions{})
		if err == nil {
			l.mu.Lock()
			at.lease = got
			l.mu.Unlock()
			return nil
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("renew lease %s: %w", name, err) // wrapped: IsNotFound still sees it
		}
		l.opts.Logger.Info("lease renewal conflicted; reading it again", "lease", name)
		if cur, err = leases.Get(ctx, name, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("renew lease %s: read after a conflict: %w", name, err)
		}
	}
	return fmt.Errorf("renew lease %s: conflicted three times in a row", name)
}

// Status reports the phase of claim c's Job as the informer sees it:
// RUNNING until it is Complete or Failed (FINISHED), ErrUnknownAttempt
// when there is no such Job.
func (l *Launcher) Status(ctx context.Context, c lease.Claim) (launchers.Status, error) {
	job, err := l.jobs.Jobs(l.opts.Spec.Namespace).Get(JobName(c))
	if err != nil {
		return launchers.Status{Phase: launchers.PhaseUnknown}, launchers.ErrUnknownAttempt
	}
	where := "job " + job.Namespace + "/" + job.Name
	if cond := finishedCondition(job); cond != nil {
		return launchers.Status{Phase: launchers.PhaseFinished, Detail: fmt.Sprintf("%s %s: %s %s", where, cond.Type, cond.Reason, cond.Message)}, nil
	}
	return launchers.Status{Phase: launchers.PhaseRunning, Detail: fmt.Sprintf("%s: %d active", where, job.Status.Active)}, nil
}

// Cancel deletes claim c's Job (background propagation: its pods go
// after it; precondition on its UID, so a Job created again under the
// same name is not touched) and its Lease. An attempt with no Job is not
// an error. With writes off it deletes nothing.
func (l *Launcher) Cancel(ctx context.Context, c lease.Claim, reason string) error {
	name := JobName(c)
	l.mu.Lock()
	at := l.attempts[name]
	delete(l.attempts, name)
	l.mu.Unlock()
	if at != nil {
		at.stopFollowing()
	}
	if !l.opts.Apply {
		return nil
	}
	return l.deleteJob(ctx, c, at, reason)
}

func (l *Launcher) deleteJob(ctx context.Context, c lease.Claim, at *attempt, reason string) error {
	ns, name := l.opts.Spec.Namespace, JobName(c)
	var uid types.UID
	if at != nil {
		uid = at.jobUID
	}
	if uid == "" {
		job, err := l.opts.Client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("read job %s/%s: %w", ns, name, err)
		default:
			uid = job.UID
		}
	}
	if uid != "" {
		err := l.opts.Client.BatchV1().Jobs(ns).Delete(ctx, name, metav1.DeleteOptions{
			PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
			Preconditions:     &metav1.Preconditions{UID: &uid},
		})
		switch {
		case err == nil:
			l.opts.Logger.Info("job deleted", "job", ns+"/"+name, "task", c.TaskID, "attempt", c.Attempt, "fence", c.Fence, "reason", reason)
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// Gone already, or another Job of that name (not ours).
		default:
			return fmt.Errorf("delete job %s/%s: %w", ns, name, err)
		}
	}
	if err := l.opts.Client.CoordinationV1().Leases(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete lease %s/%s: %w", ns, name, err)
	}
	return nil
}

// Running counts the attempts whose Jobs have not finished.
func (l *Launcher) Running() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, at := range l.attempts {
		if !at.finished {
			n++
		}
	}
	return n
}

// Shutdown stops the informers and the Lease renewals. Jobs keep running:
// they are not this process's to kill. An agent restarted within the
// stale-after window adopts them (Adoptable, Adopt); otherwise its worker
// goes STALE and their leases are revoked (worker_lost), each pod's `wdc
// exec` then fences itself, and its Job's TTL (if any) removes it.
func (l *Launcher) Shutdown(ctx context.Context, reason string) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	for _, at := range l.attempts {
		at.stopFollowing()
	}
	l.mu.Unlock()
	close(l.stop)
	l.factory.Shutdown()
}

// Healthy asks the API server for /readyz within ctx: the agent's
// heartbeats stop while it fails, so the worker goes STALE.
func (l *Launcher) Healthy(ctx context.Context) error { return Ready(ctx, l.opts.Client) }

// Ready asks the API server behind client for /readyz (open to every
// authenticated identity). Errors name the server's answer or why it
// could not be reached (e.g. "connection refused").
func Ready(ctx context.Context, client kubernetes.Interface) error {
	if _, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		return fmt.Errorf("kubernetes API server: %w", err)
	}
	return nil
}

func (at *attempt) stopFollowing() {
	at.cancel()
	if at.timer != nil {
		at.timer.Stop()
	}
}

// onJob follows a Job's end: a finished Job's Lease is no longer renewed;
// a Job failed by its deadline ends the attempt infra_killed; a deleted
// Job is forgotten.
func (l *Launcher) onJob(o any, deleted bool) {
	if tomb, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = tomb.Obj
	}
	job, ok := o.(*batchv1.Job)
	if !ok {
		return
	}
	l.mu.Lock()
	at := l.attempts[job.Name]
	if at == nil || (at.jobUID != "" && at.jobUID != job.UID) {
		l.mu.Unlock()
		return
	}
	if deleted {
		delete(l.attempts, job.Name)
		at.stopFollowing()
		l.mu.Unlock()
		return
	}
	cond := finishedCondition(job)
	if cond == nil || at.finished {
		l.mu.Unlock()
		return
	}
	at.finished = true
	at.stopFollowing()
	l.mu.Unlock()
	if cond.Type == batchv1.JobFailed && cond.Reason == batchv1.JobReasonDeadlineExceeded {
		l.fail(at, lease.ReasonInfraKilled, fmt.Sprintf("job %s/%s: %s", job.Namespace, job.Name, cond.Message))
	}
}

// onPod ends an attempt whose pod cannot start or was disrupted.
func (l *Launcher) onPod(o any) {
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	l.mu.Lock()
	at := l.attempts[pod.Labels[LabelLease]]
	if at == nil || at.reported || pod.Annotations[AnnotationPrefix+"fence"] != strconv.FormatInt(at.claim.Fence, 10) {
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	where := "pod " + pod.Namespace + "/" + pod.Name
	if pod.Status.Phase == corev1.PodFailed {
		if cond := podCondition(pod, corev1.DisruptionTarget); cond != nil && cond.Status == corev1.ConditionTrue {
			l.fail(at, lease.ReasonInfraKilled, fmt.Sprintf("%s failed with condition DisruptionTarget (%s: %s): a disruption, not the task's fault", where, cond.Reason, cond.Message))
		}
		return
	}
	if pod.Status.Phase != corev1.PodPending {
		l.stopTimer(at)
		return
	}
	why := stuckReason(pod)
	if why == "" {
		l.stopTimer(at)
		return
	}
	left := time.Until(pod.CreationTimestamp.Add(l.opts.PendingBound))
	if left <= 0 {
		l.fail(at, lease.ReasonLaunchFailed, fmt.Sprintf("%s %s for more than %s", where, why, l.opts.PendingBound))
		return
	}
	l.mu.Lock()
	if at.timer == nil {
		ns, name := pod.Namespace, pod.Name
		at.timer = time.AfterFunc(left+10*time.Millisecond, func() {
			l.mu.Lock()
			at.timer = nil
			l.mu.Unlock()
			if p, err := l.pods.Pods(ns).Get(name); err == nil {
				l.onPod(p)
			}
		})
	}
	l.mu.Unlock()
}

func (l *Launcher) stopTimer(at *attempt) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if at.timer != nil {
		at.timer.Stop()
		at.timer = nil
	}
}

// imagePullReasons are container waiting reasons that mean the image (or
// the container's configuration) keeps the pod from starting.
var imagePullReasons = map[string]bool{
	"ImagePullBackOff": true, "ErrImagePull": true, "InvalidImageName": true,
	"ErrImageNeverPull": true, "CreateContainerConfigError": true,
}

// stuckReason says why a Pending pod is not starting: not scheduled (with
// the scheduler's reason when it gave one), or its container waiting on
// its image; "" when it is on its way.
func stuckReason(pod *corev1.Pod) string {
	if pod.Spec.NodeName == "" {
		if cond := podCondition(pod, corev1.PodScheduled); cond != nil && cond.Status == corev1.ConditionFalse {
			return fmt.Sprintf("is not scheduled (%s: %s)", cond.Reason, cond.Message)
		}
		return "is not scheduled"
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && imagePullReasons[w.Reason] {
			return fmt.Sprintf("cannot start container %s (%s: %s)", cs.Name, w.Reason, w.Message)
		}
	}
	return ""
}

// fail reports the attempt's end once; a launch failure also deletes its
// Job, so that a pod scheduled late does not start it.
func (l *Launcher) fail(at *attempt, reason lease.RetryReason, detail string) {
	l.mu.Lock()
	if at.reported {
		l.mu.Unlock()
		return
	}
	at.reported = true
	l.mu.Unlock()
	c := at.claim
	l.opts.Logger.Warn("attempt ended by the cluster", "task", c.TaskID, "attempt", c.Attempt, "fence", c.Fence, "reason", reason, "detail", detail)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := l.report(ctx, api.AttemptFailedSignal{Claim: c, Reason: reason, Detail: detail}); err != nil {
			l.opts.Logger.Warn("could not report the attempt's end", "task", c.TaskID, "fence", c.Fence, "error", err)
		}
		if reason == lease.ReasonLaunchFailed {
			if err := l.deleteJob(ctx, c, at, string(reason)); err != nil {
				l.opts.Logger.Warn("could not delete the job", "task", c.TaskID, "fence", c.Fence, "error", err)
				return
			}
			l.mu.Lock()
			if l.attempts[JobName(c)] == at {
				delete(l.attempts, JobName(c))
			}
			l.mu.Unlock()
			at.stopFollowing()
		}
	}()
}

// report sends f, with a Signer signed by a key delegated to its attempt
// (as the attempt's own executor would sign it).
func (l *Launcher) report(ctx context.Context, f api.AttemptFailedSignal) error {
	if l.opts.Signer != nil {
		var err error
		if f, err = executor.SignReport(l.opts.Signer.ForAttempt(f.Claim), f); err != nil {
			return fmt.Errorf("sign the report: %w", err)
		}
	}
	return l.opts.Reporter.ReportFailure(ctx, f)
}

func finishedCondition(job *batchv1.Job) *batchv1.JobCondition {
	for i, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return &job.Status.Conditions[i]
		}
	}
	return nil
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i, c := range pod.Status.Conditions {
		if c.Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// Adoptable lists the worker's Jobs (from the informer's cache) that have
// not finished and whose lease is current, or cannot be verified; a Job
// whose lease is no longer current (executor.NotCurrent) is deleted. A
// Job whose annotations do not name a claim of this worker is left alone.
// Without Options.Control it lists nothing.
func (l *Launcher) Adoptable(ctx context.Context) ([]lease.Claim, error) {
	if l.opts.Control == nil {
		return nil, nil
	}
	jobs, err := l.jobs.Jobs(l.opts.Spec.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []lease.Claim
	for _, job := range jobs {
		if job.DeletionTimestamp != nil || finishedCondition(job) != nil {
			continue
		}
		c, err := ClaimOfJob(job)
		if err != nil || c.WorkerID != l.opts.WorkerID {
			l.opts.Logger.Warn("job not adopted: it names no attempt of this worker", "job", job.Namespace+"/"+job.Name, "error", err)
			continue
		}
		err = executor.CheckLease(ctx, l.opts.Control, c)
		switch {
		case executor.NotCurrent(err):
			l.opts.Logger.Info("job not adopted: its lease is no longer current; deleting it", "job", job.Namespace+"/"+job.Name, "why", err)
			if l.opts.Apply {
				if derr := l.deleteJob(ctx, c, &attempt{claim: c, jobUID: job.UID}, "lease no longer current"); derr != nil {
					l.opts.Logger.Warn("could not delete the job", "job", job.Name, "error", derr)
				}
			}
			continue
		case err != nil:
			l.opts.Logger.Warn("job's lease could not be verified; claiming it, the registry decides", "job", job.Namespace+"/"+job.Name, "error", err)
		}
		out = append(out, c)
	}
	return out, nil
}

// Adopt follows the adopted attempts' Jobs again, as Submit does (Lease
// renewals, the pod and Job watch that reports their end, Cancel), and
// deletes the refused ones' Jobs.
func (l *Launcher) Adopt(ctx context.Context, adopted, refused []lease.Claim) {
	ns := l.opts.Spec.Namespace
	for _, c := range adopted {
		name := JobName(c)
		job, err := l.jobs.Jobs(ns).Get(name)
		if err != nil {
			l.opts.Logger.Warn("adopted job is gone", "job", ns+"/"+name, "error", err)
			continue
		}
		lz, err := l.opts.Client.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		var ttl time.Duration
		if err != nil {
			l.opts.Logger.Warn("adopted job's Lease could not be read; not renewing it", "lease", ns+"/"+name, "error", err)
			lz = nil
		} else if d := lz.Spec.LeaseDurationSeconds; d != nil {
			ttl = time.Duration(*d) * time.Second
		}
		l.track(c, job.UID, lz, ttl)
		l.opts.Logger.Info("attempt adopted", "task", c.TaskID, "attempt", c.Attempt, "fence", c.Fence, "job", ns+"/"+name, "uid", job.UID)
		// What happened while no agent followed it.
		l.onJob(job, false)
		if pods, err := l.pods.List(labels.SelectorFromSet(labels.Set{LabelLease: LabelValue(name)})); err == nil {
			for _, p := range pods {
				l.onPod(p)
			}
		}
	}
	for _, c := range refused {
		l.opts.Logger.Info("adoption refused by the registry; deleting the job", "task", c.TaskID, "attempt", c.Attempt, "fence", c.Fence, "job", ns+"/"+JobName(c))
		if err := l.Cancel(ctx, c, "adoption refused by the registry"); err != nil {
			l.opts.Logger.Warn("could not delete the job", "job", JobName(c), "error", err)
		}
	}
}

// ClaimOfJob is the claim an attempt's Job was created for, read from its
// annotations (the full values: AnnotationPrefix + worker, task, attempt,
// fence; AnnotationDigest). Errors: an annotation missing or not a number.
func ClaimOfJob(job *batchv1.Job) (lease.Claim, error) {
	a := job.Annotations
	c := lease.Claim{TaskID: a[AnnotationPrefix+"task"], WorkerID: a[AnnotationPrefix+"worker"], EnvelopeDigest: a[AnnotationDigest]}
	var err1, err2 error
	c.Attempt, err1 = strconv.ParseInt(a[AnnotationPrefix+"attempt"], 10, 64)
	c.Fence, err2 = strconv.ParseInt(a[AnnotationPrefix+"fence"], 10, 64)
	if err := errors.Join(err1, err2); err != nil || c.TaskID == "" || c.WorkerID == "" || c.EnvelopeDigest == "" {
		return c, fmt.Errorf("job %s/%s: annotations name no complete claim (%v)", job.Namespace, job.Name, err)
	}
	if JobName(c) != job.Name {
		return c, fmt.Errorf("job %s/%s: its annotations name the job %s", job.Namespace, job.Name, JobName(c))
	}
	return c, nil
}

package kubetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// KubeletOptions configures a Kubelet.
type KubeletOptions struct {
	// Namespace whose pods it runs. Required.
	Namespace string
	// NodeName it binds pods to (default "kubetest-node"). No Node object
	// is needed: the API server does not check.
	NodeName string
	// Bind says whether to bind a pod: nil binds every pod; a pod it
	// refuses stays Pending, unscheduled, as with no fitting node.
	Bind func(*corev1.Pod) bool
	// Dir holds each pod's working directory and output log
	// (<Dir>/<pod>/). Required.
	Dir string
}

// Kubelet plays the scheduler and the kubelet for one namespace: it binds
// pods (a Binding, as the scheduler writes), runs each bound pod's one
// container command as a local process (its own process group, working
// directory <Dir>/<pod>/work) with exactly the environment the pod
// declares — env and envFrom, Secrets and ConfigMaps resolved (one that
// does not exist yet is waited for), nothing of the test's own — with the
// container's capabilities dropped as its securityContext says, and writes the pod's status: Running when it starts,
// then Succeeded or Failed with the container's real exit code (128+n for
// a signal). When the pod is deleted it kills the process and removes the
// pod (grace period 0), as a kubelet confirms a deletion.
type Kubelet struct {
	client kubernetes.Interface
	opts   KubeletOptions
	stop   chan struct{}

	mu    sync.Mutex
	procs map[types.UID]*podProcess
	names map[string]types.UID
	bound map[types.UID]bool
}

type podProcess struct {
	name    string
	cmd     *exec.Cmd
	log     string
	done    chan struct{}
	evicted bool
	started time.Time
}

// StartKubelet starts the kubelet's pod informer.
func StartKubelet(client kubernetes.Interface, opts KubeletOptions) (*Kubelet, error) {
	if opts.Namespace == "" || opts.Dir == "" {
		return nil, errors.New("kubetest: kubelet needs a namespace and a directory")
	}
	if opts.NodeName == "" {
		opts.NodeName = "kubetest-node"
	}
	k := &Kubelet{client: client, opts: opts, stop: make(chan struct{}),
		procs: map[types.UID]*podProcess{}, names: map[string]types.UID{}, bound: map[types.UID]bool{}}
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(opts.Namespace))
	inf := f.Core().V1().Pods().Informer()
	handle := func(o any) {
		if pod, ok := o.(*corev1.Pod); ok {
			go k.sync(pod.DeepCopy())
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: handle, UpdateFunc: func(_, o any) { handle(o) }}); err != nil {
		return nil, err
	}
	f.Start(k.stop)
	f.WaitForCacheSync(k.stop)
	return k, nil
}

// Stop stops the informer and kills every process it runs.
func (k *Kubelet) Stop() {
	close(k.stop)
	k.mu.Lock()
	procs := make([]*podProcess, 0, len(k.procs))
	for _, p := range k.procs {
		procs = append(procs, p)
	}
	k.mu.Unlock()
	for _, p := range procs {
		p.kill()
	}
}

func (k *Kubelet) sync(pod *corev1.Pod) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch {
	case pod.DeletionTimestamp != nil:
		k.mu.Lock()
		p := k.procs[pod.UID]
		k.mu.Unlock()
		if p != nil {
			p.kill()
		}
		err := k.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &pod.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			fmt.Fprintf(os.Stderr, "kubetest kubelet: remove pod %s: %v\n", pod.Name, err)
		}
	case pod.Spec.NodeName == "":
		if k.opts.Bind != nil && !k.opts.Bind(pod) {
			return
		}
		k.mu.Lock()
		already := k.bound[pod.UID]
		k.bound[pod.UID] = true
		k.mu.Unlock()
		if already {
			return
		}
		err := k.client.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: k.opts.NodeName},
		}, metav1.CreateOptions{})
		if err != nil {
			fmt.Fprintf(os.Stderr, "kubetest kubelet: bind pod %s: %v\n", pod.Name, err)
		}
	case pod.Spec.NodeName == k.opts.NodeName && pod.Status.Phase == corev1.PodPending:
		k.run(ctx, pod)
	}
}

// run starts the pod's container command once, and writes its status.
func (k *Kubelet) run(ctx context.Context, pod *corev1.Pod) {
	k.mu.Lock()
	if _, ok := k.procs[pod.UID]; ok {
		k.mu.Unlock()
		return
	}
	p := &podProcess{name: pod.Name, done: make(chan struct{})}
	k.procs[pod.UID] = p
	k.names[pod.Name] = pod.UID
	k.mu.Unlock()

	c := pod.Spec.Containers[0]
	env, err := k.environ(ctx, pod.Namespace, c)
	// As a kubelet: a container whose Secret or ConfigMap does not exist
	// yet waits for it (CreateContainerConfigError, retried) while its pod
	// exists.
	for apierrors.IsNotFound(err) && k.podLive(ctx, pod) {
		select {
		case <-k.stop:
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
			env, err = k.environ(ctx, pod.Namespace, c)
			continue
		}
		break
	}
	dir := filepath.Join(k.opts.Dir, pod.Name)
	if err == nil {
		err = os.MkdirAll(filepath.Join(dir, "work"), 0o755)
	}
	var logFile *os.File
	if err == nil {
		p.log = filepath.Join(dir, "output.log")
		logFile, err = os.Create(p.log)
	}
	if err == nil {
		argv := append(append([]string{}, c.Command...), c.Args...)
		if len(argv) == 0 {
			err = errors.New("the container has no command")
		} else {
			argv = withSecurityContext(c.SecurityContext, argv)
			p.cmd = exec.Command(argv[0], argv[1:]...)
			p.cmd.Env = env
			p.cmd.Dir = filepath.Join(dir, "work")
			if c.WorkingDir != "" {
				p.cmd.Dir = c.WorkingDir
			}
			p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
			p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			err = p.cmd.Start()
		}
	}
	if err != nil {
		// As a kubelet: the container cannot be created.
		close(p.done)
		k.writeStatus(ctx, pod, func(s *corev1.PodStatus) {
			s.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: err.Error()}}}}
		})
		return
	}
	p.started = time.Now()
	go func() {
		_ = p.cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	k.writeStatus(ctx, pod, func(s *corev1.PodStatus) {
		now := metav1.NewTime(p.started)
		s.Phase = corev1.PodRunning
		s.StartTime = &now
		s.HostIP = "127.0.0.1"
		s.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image, Ready: true, Started: ptr.To(true),
			ContainerID: fmt.Sprintf("kubetest://%d", p.cmd.Process.Pid),
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
	})
	go func() {
		<-p.done
		k.mu.Lock()
		evicted := p.evicted
		k.mu.Unlock()
		if evicted {
			return
		}
		code := p.cmd.ProcessState.ExitCode()
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		k.writeStatus(ctx, pod, func(s *corev1.PodStatus) { terminated(s, c, p, int32(code)) })
	}()
}

// withSecurityContext runs argv as a container runtime would under sc:
// with its capabilities dropped (only "ALL" is supported: an empty
// bounding set, so even root holds none) and no_new_privs, through
// util-linux's setpriv.
func withSecurityContext(sc *corev1.SecurityContext, argv []string) []string {
	if sc == nil {
		return argv
	}
	var opts []string
	if sc.Capabilities != nil && slices.Contains(sc.Capabilities.Drop, "ALL") {
		opts = append(opts, "--bounding-set=-all", "--inh-caps=-all")
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		opts = append(opts, "--no-new-privs")
	}
	if len(opts) == 0 {
		return argv
	}
	return append(append(append([]string{"setpriv"}, opts...), "--"), argv...)
}

// podLive says whether pod still exists and is not being deleted.
func (k *Kubelet) podLive(ctx context.Context, pod *corev1.Pod) bool {
	cur, err := k.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	return err == nil && cur.UID == pod.UID && cur.DeletionTimestamp == nil
}

// terminated sets s to the pod's end with the container's exit code.
func terminated(s *corev1.PodStatus, c corev1.Container, p *podProcess, code int32) {
	now := metav1.Now()
	reason := "Completed"
	s.Phase = corev1.PodSucceeded
	if code != 0 {
		reason, s.Phase = "Error", corev1.PodFailed
	}
	for i := range s.Conditions {
		if s.Conditions[i].Type == corev1.PodReady || s.Conditions[i].Type == corev1.ContainersReady {
			s.Conditions[i].Status = corev1.ConditionFalse
			s.Conditions[i].LastTransitionTime = now
		}
	}
	s.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image, Started: ptr.To(false),
		ContainerID: fmt.Sprintf("kubetest://%d", p.cmd.Process.Pid),
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason,
			StartedAt: metav1.NewTime(p.started), FinishedAt: now}}}}
}

// environ is the container's environment as a kubelet builds it from the
// pod spec: envFrom sources in order, then env (which wins); a Secret's
// or ConfigMap's keys become variables. Nothing else.
func (k *Kubelet) environ(ctx context.Context, ns string, c corev1.Container) ([]string, error) {
	vars := map[string]string{}
	for _, from := range c.EnvFrom {
		var data map[string]string
		switch {
		case from.SecretRef != nil:
			s, err := k.client.CoreV1().Secrets(ns).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("secret %q: %w", from.SecretRef.Name, err)
			}
			data = map[string]string{}
			for key, v := range s.Data {
				data[key] = string(v)
			}
			for key, v := range s.StringData {
				data[key] = v
			}
		case from.ConfigMapRef != nil:
			cm, err := k.client.CoreV1().ConfigMaps(ns).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("configmap %q: %w", from.ConfigMapRef.Name, err)
			}
			data = cm.Data
		}
		for key, v := range data {
			vars[from.Prefix+key] = v
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			vars[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			s, err := k.client.CoreV1().Secrets(ns).Get(ctx, e.ValueFrom.SecretKeyRef.Name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			vars[e.Name] = string(s.Data[e.ValueFrom.SecretKeyRef.Key])
		default:
			return nil, fmt.Errorf("env %s: only values and secretKeyRef are supported here", e.Name)
		}
	}
	out := make([]string, 0, len(vars))
	for key, v := range vars {
		out = append(out, key+"="+v)
	}
	sort.Strings(out)
	return out, nil
}

func (k *Kubelet) writeStatus(ctx context.Context, pod *corev1.Pod, mutate func(*corev1.PodStatus)) {
	pods := k.client.CoreV1().Pods(pod.Namespace)
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != pod.UID || cur.DeletionTimestamp != nil {
			return nil
		}
		mutate(&cur.Status)
		_, err = pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		fmt.Fprintf(os.Stderr, "kubetest kubelet: status of pod %s: %v\n", pod.Name, err)
	}
}

func (k *Kubelet) process(podName string) (*podProcess, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p := k.procs[k.names[podName]]
	if p == nil || p.cmd == nil || p.cmd.Process == nil {
		return nil, fmt.Errorf("kubetest kubelet: pod %s runs no process", podName)
	}
	return p, nil
}

// Running reports whether the pod's process was started and has not
// ended.
func (k *Kubelet) Running(podName string) bool {
	started, ended := k.state(podName)
	return started && !ended
}

// Exited reports whether the pod's process ran and ended.
func (k *Kubelet) Exited(podName string) bool {
	_, ended := k.state(podName)
	return ended
}

func (k *Kubelet) state(podName string) (started, ended bool) {
	p, err := k.process(podName)
	if err != nil {
		return false, false
	}
	select {
	case <-p.done:
		return true, true
	default:
		return true, false
	}
}

// Output is what the pod's process wrote to stdout and stderr so far.
func (k *Kubelet) Output(podName string) string {
	p, err := k.process(podName)
	if err != nil {
		return err.Error()
	}
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// Freeze stops the pod's process group (SIGSTOP): it neither runs nor
// exits, as on a hung node.
func (k *Kubelet) Freeze(podName string) error {
	p, err := k.process(podName)
	if err != nil {
		return err
	}
	return syscall.Kill(-p.cmd.Process.Pid, syscall.SIGSTOP)
}

// Evict ends the pod as a kubelet under node pressure does: the process
// group is killed, then the pod gets the DisruptionTarget condition
// (reason TerminationByKubelet) and phase Failed, its container exit code
// 137.
func (k *Kubelet) Evict(ctx context.Context, podName string) error {
	p, err := k.process(podName)
	if err != nil {
		return err
	}
	k.mu.Lock()
	p.evicted = true
	k.mu.Unlock()
	p.kill()
	pod, err := k.client.CoreV1().Pods(k.opts.Namespace).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	c := pod.Spec.Containers[0]
	k.writeStatus(ctx, pod, func(s *corev1.PodStatus) {
		now := metav1.Now()
		s.Conditions = append(s.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
			Reason: "TerminationByKubelet", Message: "The node was low on resource: memory.", LastTransitionTime: now})
		terminated(s, c, p, 137)
		s.Reason, s.Message = "Evicted", "The node was low on resource: memory."
	})
	return nil
}

// kill kills the process group (SIGKILL, and SIGCONT for a frozen one)
// and waits for the process.
func (p *podProcess) kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGCONT)
	<-p.done
}

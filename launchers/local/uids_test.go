package local

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/internal/executor"
	"github.com/wdc-runtime/wdc/launchers"
	"github.com/wdc-runtime/wdc/lease"
)

// taskLeases answers each task's lease query with that task's lease.
type taskLeases struct {
	leaseControl
	mu     sync.Mutex
	leases map[string]lease.Lease
}

func (c *taskLeases) Lease(_ context.Context, taskID string) (api.TaskView, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.leases[taskID]
	return api.TaskView{TaskID: taskID, Lease: &l}, nil
}

// searchable makes dir and every directory above it searchable by other
// users (t.TempDir's are 0700), so a uid of the range can reach it.
func searchable(t *testing.T, dir string) {
	t.Helper()
	for p := dir; p != filepath.Dir(p); p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		require.NoError(t, err)
		require.NoError(t, os.Chmod(p, fi.Mode().Perm()|0o111))
	}
}

// With --run-as-uid-range each running attempt has a uid of its own and a
// task directory only that uid can enter: one attempt's command cannot read
// another's envelope (its env secrets). Attempts beyond the range are not
// started, and an ended attempt's directory is given back before its uid
// serves again.
func TestEachAttemptRunsUnderAUIDOfItsOwn(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test switches uids: run it as root (CI does)")
	}
	blobs, err := blobstore.OpenDir(context.Background(), t.TempDir())
	require.NoError(t, err)
	work, gateDir := t.TempDir(), t.TempDir()
	searchable(t, work)
	searchable(t, gateDir)
	gate := filepath.Join(gateDir, "gate")
	ctl := &taskLeases{leases: map[string]lease.Lease{}}
	uids := executor.UIDRange{First: 70000, Last: 70001}
	l, err := New(Options{WorkerID: "w-a", WorkDir: work, Blobs: blobs, Control: ctl, UIDs: &uids})
	require.NoError(t, err)

	attempt := func(task, other string) launchers.Attempt {
		otherDir := executor.TaskDir(work, lease.Claim{TaskID: other, WorkerID: "w-a", Attempt: 1, Fence: 1})
		env := envelope.Envelope{TaskID: task, RunID: "r1", WorldID: "w1",
			Command: []string{"/bin/sh", "-c", `id -u > outputs/uid; while [ ! -e "$GATE" ]; do sleep 0.05; done`},
			Env:     map[string]string{"PATH": "/usr/bin:/bin", "OTHER": otherDir, "GATE": gate, "SECRET": "hunter2-" + task}}
		env.Normalize()
		d, err := env.Digest()
		require.NoError(t, err)
		ls := lease.Lease{TaskID: task, EnvelopeDigest: d, WorkerID: "w-a", Attempt: 1, Fence: 1, State: lease.Active, TTL: 30 * time.Second, GrantedAt: time.Now()}
		ctl.mu.Lock()
		ctl.leases[task] = ls
		ctl.mu.Unlock()
		return launchers.Attempt{Envelope: env, Lease: ls, HeartbeatInterval: time.Second,
			StillCurrent: func(context.Context) error { return nil }}
	}
	subA, err := l.Submit(context.Background(), attempt("ta", "tb"))
	require.NoError(t, err)
	subB, err := l.Submit(context.Background(), attempt("tb", "ta"))
	require.NoError(t, err)
	_, err = l.Submit(context.Background(), attempt("tc", "ta"))
	require.ErrorContains(t, err, "all 2 uids of --run-as-uid-range 70000-70001 are in use")

	owner := func(p string) (uint32, os.FileMode) {
		fi, err := os.Stat(p)
		require.NoError(t, err)
		return fi.Sys().(*syscall.Stat_t).Uid, fi.Mode().Perm()
	}
	read := func(p string) string {
		var b []byte
		require.Eventually(t, func() bool {
			var err error
			b, err = os.ReadFile(p)
			return err == nil && len(b) > 0
		}, 10*time.Second, 20*time.Millisecond, p)
		return strings.TrimSpace(string(b))
	}
	seen := map[string]uint32{}
	for _, dir := range []string{subA.TaskDir, subB.TaskDir} {
		uid := read(filepath.Join(dir, "outputs", "uid"))
		u, mode := owner(dir)
		seen[uid] = u
		assert.Equal(t, uid, strconv.FormatUint(uint64(u), 10), "the task directory is its attempt's uid's")
		assert.Equal(t, os.FileMode(0o700), mode, "and no one else's")
	}
	require.Len(t, seen, 2, "one uid each")
	// While both run, each one's uid tries the other's envelope (its env
	// secrets), outputs and inputs.
	asUID := func(uid uint32, script string) error {
		c := exec.Command("/bin/sh", "-c", script)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
		return c.Run()
	}
	uidA, uidB := seen[read(filepath.Join(subA.TaskDir, "outputs", "uid"))], seen[read(filepath.Join(subB.TaskDir, "outputs", "uid"))]
	require.NoError(t, asUID(uidA, "cat "+filepath.Join(subA.TaskDir, "envelope.json")+" >/dev/null"), "an attempt's uid reads its own envelope")
	assert.Error(t, asUID(uidA, "cat "+filepath.Join(subB.TaskDir, "envelope.json")), "nor another's envelope")
	assert.Error(t, asUID(uidB, "touch "+filepath.Join(subA.TaskDir, "outputs", "planted")), "nor write into another's outputs")
	assert.Error(t, asUID(uidB, "ls "+filepath.Join(subA.TaskDir, "inputs")), "nor list another's inputs")

	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	require.Eventually(t, func() bool { return l.Running() == 0 }, 20*time.Second, 20*time.Millisecond)
	for _, dir := range []string{subA.TaskDir, subB.TaskDir} {
		for _, p := range []string{dir, filepath.Join(dir, "outputs"), filepath.Join(dir, "outputs", "uid")} {
			u, _ := owner(p)
			assert.Zero(t, u, "%s is given back when the attempt ends", p)
		}
	}
	// The uids are free again.
	sub, err := l.Submit(context.Background(), attempt("tc", "ta"))
	require.NoError(t, err)
	assert.NotEmpty(t, sub.TaskDir)
	require.Eventually(t, func() bool { return l.Running() == 0 }, 20*time.Second, 20*time.Millisecond)

	// An agent that died before giving a directory back: the next one
	// takes it back when it starts.
	left := filepath.Join(work, "td", "1-1")
	require.NoError(t, os.MkdirAll(left, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(left, "envelope.json"), []byte("{}"), 0o600))
	for _, p := range []string{left, filepath.Join(left, "envelope.json")} {
		require.NoError(t, os.Lchown(p, 70001, 70001))
	}
	_, err = New(Options{WorkerID: "w-a", WorkDir: work, Blobs: blobs, Control: ctl, UIDs: &uids})
	require.NoError(t, err)
	for _, p := range []string{left, filepath.Join(left, "envelope.json")} {
		u, _ := owner(p)
		assert.Zero(t, u, "%s taken back at start", p)
	}
}

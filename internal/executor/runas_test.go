package executor

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The helper process of TestProtectProcessHidesTheEnvironmentFromItsUser:
// with WDC_TEST_PROTECT_HELPER set, the test binary (optionally) calls
// ProtectProcess and then runs a command of its own user that reads its
// /proc files, printing what the command read and its exit status.
func init() {
	mode := os.Getenv("WDC_TEST_PROTECT_HELPER")
	if mode == "" {
		return
	}
	if mode == "protect" {
		if err := ProtectProcess(); err != nil {
			os.Stderr.WriteString(err.Error())
			os.Exit(3)
		}
	}
	cmd := exec.Command("/bin/sh", "-c", `tr '\0' '\n' < /proc/$PPID/environ; echo "environ:$?"; head -c 16 /proc/$PPID/mem >/dev/null 2>&1; echo "mem:$?"; ls /proc/$PPID/fd >/dev/null 2>&1; echo "fd:$?"`)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Stdout, cmd.Stderr = os.Stdout, io.Discard
	if err := cmd.Run(); err != nil {
		os.Stderr.WriteString(err.Error())
		os.Exit(4)
	}
	os.Exit(0)
}

// nobody is the unprivileged user the tests run commands as.
func nobody(t *testing.T) *RunAs {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("switching a command's user needs root (CI runs as root)")
	}
	r, err := LookupRunAs("nobody", "")
	require.NoError(t, err, "the tests need the user nobody")
	return r
}

// publicCopy copies the test binary where any user can run it.
func publicCopy(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	dir, err := os.MkdirTemp("", "wdc-protect-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	b, err := os.ReadFile(self)
	require.NoError(t, err)
	bin := filepath.Join(dir, "helper")
	require.NoError(t, os.WriteFile(bin, b, 0o755))
	return bin
}

// A process that made itself non-dumpable cannot be read by a command of
// its own user; without ProtectProcess the same command reads its
// environment, so the check can fail. Root passes every such check (it
// has CAP_SYS_PTRACE), so the pair runs as nobody when the test is root.
func TestProtectProcessHidesTheEnvironmentFromItsUser(t *testing.T) {
	bin := publicCopy(t)
	run := func(mode string) string {
		cmd := exec.Command(bin)
		cmd.Dir = filepath.Dir(bin)
		cmd.Env = []string{"WDC_TEST_PROTECT_HELPER=" + mode, "AWS_SECRET_ACCESS_KEY=hunter2-secret"}
		if os.Geteuid() == 0 {
			r := nobody(t)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: r.credential()}
		}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		require.NoError(t, cmd.Run(), "helper %s: %s", mode, errb.String())
		return out.String()
	}

	open := run("open")
	assert.Contains(t, open, "AWS_SECRET_ACCESS_KEY=hunter2-secret", "an unprotected process's environment is readable by its user")
	assert.Contains(t, open, "environ:0")

	protected := run("protect")
	assert.NotContains(t, protected, "hunter2-secret")
	for _, file := range []string{"environ", "mem", "fd"} {
		assert.NotContains(t, protected, file+":0\n", "/proc/$PPID/%s must not be readable", file)
	}
}

// A command run as another user gets the task directory and outputs/ to
// write in, cannot read the executor's /proc files or its private files,
// and its outputs are accepted as usual.
func TestRunAsRunsTheCommandAsThatUser(t *testing.T) {
	r := nobody(t)
	private := filepath.Join(t.TempDir(), "credentials")
	require.NoError(t, os.WriteFile(private, []byte("aws_secret_access_key=hunter2-secret\n"), 0o600))
	t.Setenv("AWS_SECRET_ACCESS_KEY", "hunter2-secret")
	script := `id -u > outputs/uid.txt; id -G > outputs/groups.txt
tr '\0' '\n' < /proc/$PPID/environ > outputs/environ.txt 2>/dev/null; echo "environ:$?" >> outputs/tries.txt
head -c 64 /proc/$PPID/mem > outputs/mem.bin 2>/dev/null; echo "mem:$?" >> outputs/tries.txt
cat ` + private + ` > outputs/creds.txt 2>/dev/null; echo "creds:$?" >> outputs/tries.txt
echo tampered > envelope.json 2>/dev/null; echo "envelope:$?" >> outputs/tries.txt
echo ok > scratch.txt`
	f := newFixture(t, script, map[string]string{"in.txt": "input"})
	// t.TempDir makes 0700 directories; the user must reach the work root.
	require.NoError(t, os.Chmod(filepath.Dir(f.root), 0o755))
	require.NoError(t, os.Chmod(f.root, 0o755))
	require.NoError(t, r.CheckWorkDir(f.root))

	rep := f.wait(f.start(func(o *Options) { o.RunAs = r }))
	require.Equal(t, OutcomeAccepted, rep.Outcome, "%+v", rep)
	out := func(name string) string {
		b, err := os.ReadFile(filepath.Join(TaskDir(f.root, claimOf(f.lease)), "outputs", name))
		require.NoError(t, err)
		return string(b)
	}
	assert.Equal(t, strconv.Itoa(int(r.UID)), strings.TrimSpace(out("uid.txt")))
	assert.Equal(t, strconv.Itoa(int(r.GID)), strings.TrimSpace(out("groups.txt")), "no supplementary groups")
	tries := out("tries.txt")
	for _, what := range []string{"environ", "mem", "creds", "envelope"} {
		assert.NotContains(t, tries, what+":0\n", "the command could %s", what)
	}
	for _, name := range []string{"environ.txt", "mem.bin", "creds.txt"} {
		// A failed read may leave no file: the shell opens the input first.
		b, _ := os.ReadFile(filepath.Join(TaskDir(f.root, claimOf(f.lease)), "outputs", name))
		assert.NotContains(t, string(b), "hunter2-secret")
	}
	require.Len(t, f.ctl.submitted, 1)
	var names []string
	for _, a := range f.ctl.submitted[0].Artifacts {
		names = append(names, a.Name)
	}
	assert.Subset(t, names, []string{"uid.txt", "groups.txt", "tries.txt"})
}

func TestLookupRunAsNamesTheFlag(t *testing.T) {
	if _, err := user.Lookup("nobody"); err != nil {
		t.Fatal("the tests need the user nobody")
	}
	for in, want := range map[[2]string]string{
		{"no-such-user-wdc", ""}:  `--run-as-user "no-such-user-wdc": no such user`,
		{"nobody", "no-such-grp"}: `--run-as-group "no-such-grp": no such group`,
		{"", "nogroup"}:           `--run-as-group "nogroup": goes with --run-as-user`,
		{"root", ""}:              `--run-as-user "root": is root; name an unprivileged user`,
		{"0", ""}:                 `--run-as-user "0": is root; name an unprivileged user`,
	} {
		_, err := LookupRunAs(in[0], in[1])
		assert.EqualError(t, err, want, "%q", in)
	}
	r, err := LookupRunAs("65534", "")
	require.NoError(t, err)
	assert.Equal(t, uint32(65534), r.UID)
	none, err := LookupRunAs("", "")
	require.NoError(t, err)
	assert.Nil(t, none)
}

func TestCheckWorkDirNeedsSearchOnEveryAncestor(t *testing.T) {
	r := &RunAs{UID: 65534, GID: 65534, User: "nobody"}
	top := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(top), 0o755))
	require.NoError(t, os.Chmod(top, 0o700))
	err := r.CheckWorkDir(filepath.Join(top, "work", "w-a"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), top+" (-rwx------")
	require.NoError(t, os.Chmod(top, 0o711))
	assert.NoError(t, r.CheckWorkDir(filepath.Join(top, "work", "w-a")))
}

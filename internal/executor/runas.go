package executor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// RunAs is the user and group an attempt's command runs as (`wdc agent`
// and `wdc exec` --run-as-user, --run-as-group), with no supplementary
// groups. The executor keeps its own identity: a command of another user
// cannot read the executor's memory, environment, open files or
// credential files.
type RunAs struct {
	UID, GID uint32
	// User names the user as it was given, for messages.
	User string
	// Private: the uid is this attempt's alone (UIDRange), so its task
	// directory is made 0700 to it and given back to the executor's user
	// when the attempt ends, before the uid serves another attempt.
	Private bool
}

// UIDRange is the uids an agent gives its attempts one each (`wdc agent
// --run-as-uid-range FIRST-LAST`, as Nomad's dynamic workload users): an
// attempt's command runs as uid u and gid u, no supplementary group, and
// no two running attempts share one.
type UIDRange struct {
	First, Last uint32
}

// ParseUIDRange parses "FIRST-LAST" (inclusive; both above 0 and at most
// 2^31-1). Errors name the flag.
func ParseUIDRange(s string) (UIDRange, error) {
	a, b, ok := strings.Cut(s, "-")
	first, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 31)
	last, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 31)
	switch {
	case !ok || err1 != nil || err2 != nil:
		return UIDRange{}, fmt.Errorf("--run-as-uid-range %q: want FIRST-LAST, e.g. 70000-70999", s)
	case first == 0 || last < first:
		return UIDRange{}, fmt.Errorf("--run-as-uid-range %q: want 0 < FIRST <= LAST", s)
	}
	return UIDRange{First: uint32(first), Last: uint32(last)}, nil
}

// Size is how many uids the range holds: at most that many attempts run
// at once.
func (r UIDRange) Size() int { return int(r.Last-r.First) + 1 }

// RunAs is the user of uid u of the range.
func (r UIDRange) RunAs(u uint32) *RunAs {
	return &RunAs{UID: u, GID: u, User: "uid " + strconv.FormatUint(uint64(u), 10), Private: true}
}

// LookupRunAs resolves --run-as-user (a user name or a numeric UID) and
// --run-as-group (a group name or a numeric GID; empty: the user's primary
// group). An empty user means no switch (nil). Errors name the flag.
func LookupRunAs(userName, groupName string) (*RunAs, error) {
	if userName == "" {
		if groupName != "" {
			return nil, fmt.Errorf("--run-as-group %q: goes with --run-as-user", groupName)
		}
		return nil, nil
	}
	r := &RunAs{User: userName}
	u, err := user.Lookup(userName)
	if err != nil {
		if u, err = user.LookupId(userName); err != nil {
			return nil, fmt.Errorf("--run-as-user %q: no such user", userName)
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("--run-as-user %q: uid %q is not numeric", userName, u.Uid)
	}
	gidText := u.Gid
	if groupName != "" {
		g, err := user.LookupGroup(groupName)
		if err != nil {
			if g, err = user.LookupGroupId(groupName); err != nil {
				return nil, fmt.Errorf("--run-as-group %q: no such group", groupName)
			}
		}
		gidText = g.Gid
	}
	gid, err := strconv.ParseUint(gidText, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("--run-as-group %q: gid %q is not numeric", groupName, gidText)
	}
	r.UID, r.GID = uint32(uid), uint32(gid)
	if r.UID == 0 {
		return nil, fmt.Errorf("--run-as-user %q: is root; name an unprivileged user", userName)
	}
	return r, nil
}

// credential is the command's process credential: r's user and group and
// no supplementary group (so none of the executor's groups' files).
func (r *RunAs) credential() *syscall.Credential {
	return &syscall.Credential{Uid: r.UID, Gid: r.GID, Groups: []uint32{}}
}

// CheckWorkDir verifies that r's user can reach dir (the work root: search
// permission on dir and every directory above it), since its commands
// start in task directories below it. The check is by mode bits; dir need
// not exist yet, and its missing part is checked when it is created.
func (r *RunAs) CheckWorkDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for p := abs; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return err
		default:
			st, ok := fi.Sys().(*syscall.Stat_t)
			if ok && !searchable(fi.Mode(), st.Uid, st.Gid, r.UID, r.GID) {
				return fmt.Errorf("%s (%s, owner %d:%d) cannot be entered by uid %d gid %d; allow it search (chmod o+x) or choose another work dir", p, fi.Mode().Perm(), st.Uid, st.Gid, r.UID, r.GID)
			}
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// searchable reports whether a user uid, group gid (no other groups) may
// search a directory of mode m owned by ouid:ogid.
func searchable(m fs.FileMode, ouid, ogid, uid, gid uint32) bool {
	switch {
	case ouid == uid:
		return m&0o100 != 0
	case ogid == gid:
		return m&0o010 != 0
	}
	return m&0o001 != 0
}

// handOver gives the task directory to r's user: the directory and
// outputs/ become its own (the command writes there); envelope.json and
// inputs/ stay the executor's and readable, so the command cannot change
// what was staged. Ancestors created for the task are made searchable.
func (r *RunAs) handOver(taskDir string) error {
	if err := os.Chmod(filepath.Dir(taskDir), 0o755); err != nil {
		return err
	}
	mode := os.FileMode(0o755)
	if r.Private {
		mode = 0o700 // no other attempt's uid may enter
	}
	if err := os.Chmod(taskDir, mode); err != nil {
		return err
	}
	for _, d := range []string{taskDir, filepath.Join(taskDir, "outputs")} {
		if err := os.Lchown(d, int(r.UID), int(r.GID)); err != nil {
			return fmt.Errorf("run as uid %d: %w", r.UID, err)
		}
	}
	return nil
}

// takeBack gives a private attempt's task directory back to the
// executor's user (every entry the uid owns, never following a symlink),
// so the next attempt under the same uid cannot read it.
func (r *RunAs) takeBack(taskDir string) error {
	if !r.Private {
		return nil
	}
	uid, gid := os.Geteuid(), os.Getegid()
	return filepath.WalkDir(taskDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // gone meanwhile: nothing to give back
		}
		if err := os.Lchown(p, uid, gid); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	})
}

// TakeBackFromRange gives every entry under dir that a uid of r owns to
// this process's user (never following a symlink): what an agent that
// died left to its attempts' uids. A missing dir is nothing to do.
func TakeBackFromRange(dir string, r UIDRange) error {
	uid, gid := os.Geteuid(), os.Getegid()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Uid >= r.First && st.Uid <= r.Last {
			if err := os.Lchown(p, uid, gid); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// ProtectProcess makes this process non-dumpable (prctl PR_SET_DUMPABLE
// 0): a process of the same user without CAP_SYS_PTRACE — a task's
// command run as the executor's own user — can no longer read its
// /proc/<pid>/environ, mem, fd or maps, nor ptrace it. The setting is per
// process and is reset by exec, so the command itself stays dumpable. It
// does nothing against root: give --run-as-user too.
func ProtectProcess() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	return nil
}

// CommandsCanPtrace reports whether a command this process starts as its
// own user could read it despite ProtectProcess: this process is root and
// CAP_SYS_PTRACE is in its capability bounding set (a root command gets
// it; a container's default set lacks it).
func CommandsCanPtrace() bool {
	if os.Geteuid() != 0 {
		return false
	}
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return true
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			set, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err != nil || set&(1<<unix.CAP_SYS_PTRACE) != 0
		}
	}
	return true
}

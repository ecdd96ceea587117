package childproc

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// state returns the process state letter from /proc (R, S, T, Z...), or ""
// once the PID is gone.
func state(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+2:])[0]
}

func waitState(t *testing.T, pid int, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for state(pid) != want {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d in state %q, want %q", pid, state(pid), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLifecycle(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc")
	}
	dir := t.TempDir()
	// The shell forks a grandchild and reports its PID: signals go to the
	// whole group, so the grandchild must go with it.
	p := &Proc{Name: "sh", Bin: "/bin/sh", Args: []string{"-c", "sleep 60 & echo child=$!; wait"},
		Dir: dir, Log: filepath.Join(dir, "log"), KillWithParent: true}
	if !p.Exited() || p.Pid() != 0 || p.Signal(syscall.SIGTERM) == nil {
		t.Fatal("a process never started must read as exited, without a PID, and refuse signals")
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	var child int
	deadline := time.Now().Add(10 * time.Second)
	for child == 0 {
		if _, after, ok := strings.Cut(p.LogTail(200), "child="); ok {
			child, _ = strconv.Atoi(strings.TrimSpace(after))
		}
		if time.Now().After(deadline) {
			t.Fatalf("no child PID in the log: %q", p.LogTail(200))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	waitState(t, p.Pid(), "T")
	waitState(t, child, "T")
	if err := p.Cont(); err != nil {
		t.Fatal(err)
	}
	waitState(t, p.Pid(), "S")
	first := p.Pid()
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if !p.Exited() || p.Signal(syscall.SIGCONT) == nil {
		t.Fatal("after Kill: not exited, or still signalled")
	}
	waitState(t, child, "") // the grandchild went with the group

	// Start again: a new process, the log appended.
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if p.Pid() == first || p.Exited() {
		t.Fatalf("restart: pid %d (was %d), exited %v", p.Pid(), first, p.Exited())
	}
	_ = p.Stop()
	p.Term(5 * time.Second) // a stopped process still ends on Term
	if !p.Exited() {
		t.Fatal("Term left it running")
	}
	if n := strings.Count(p.LogTail(1000), "=== sh start"); n != 2 {
		t.Fatalf("log has %d start lines, want 2: %q", n, p.LogTail(1000))
	}
}

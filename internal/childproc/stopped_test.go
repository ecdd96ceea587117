package childproc

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// WaitStopped returns once every thread of a SIGSTOPped process is
// stopped, and not for a running one.
func TestWaitStopped(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep command:", err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	pid := cmd.Process.Pid
	if _, err := WaitStopped(pid, 50*time.Millisecond); err == nil {
		t.Fatal("a running process counted as stopped")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if _, err := WaitStopped(pid, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for t0 := time.Now(); ; time.Sleep(time.Millisecond) {
		if ok, err := AllStopped(pid); err != nil || !ok {
			break
		}
		if time.Since(t0) > 2*time.Second {
			t.Fatal("still stopped after SIGCONT")
		}
	}
}

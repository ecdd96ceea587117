package childproc

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// WaitStopped waits until every thread of process pid is stopped (state T
// in /proc/<pid>/task/*/stat) and returns how long that took. SIGSTOP is
// asynchronous: kill returns once the signal is queued, and the process
// stops only when one of its threads takes it and stops the others. On a
// busy machine its threads can run user code for milliseconds after kill
// returned (a frozen replica relaying an answer, say), so what a test or a
// fault scenario does "while it is frozen" waits for this.
func WaitStopped(pid int, timeout time.Duration) (time.Duration, error) {
	t0 := time.Now()
	for {
		stopped, err := AllStopped(pid)
		if err != nil {
			return time.Since(t0), err
		}
		if stopped {
			return time.Since(t0), nil
		}
		if time.Since(t0) > timeout {
			return time.Since(t0), fmt.Errorf("process %d not stopped within %v of SIGSTOP", pid, timeout)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// AllStopped reports whether every thread of process pid is stopped
// (Linux: /proc/PID/task/*/stat).
func AllStopped(pid int) (bool, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil {
		return false, err
	}
	if len(tasks) == 0 {
		return false, fmt.Errorf("process %d: no threads in /proc", pid)
	}
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			return false, err // a thread that ended is not expected while stopping
		}
		// pid (comm) state ...: comm may hold spaces and parentheses; the
		// state follows the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 >= len(s) {
			return false, fmt.Errorf("%s: %q", t, s)
		}
		if st := s[i+2]; st != 'T' && st != 't' {
			return false, nil
		}
	}
	return true, nil
}

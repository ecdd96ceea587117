// Package childproc runs the child processes of the tests and of the fault
// harness (redis-server, sentinels, fenceproxy replicas) so that they can be
// crashed, frozen and restarted on purpose, and never outlive their use.
//
// A child runs in its own process group: a terminal's ^C meant for the parent
// does not reach it, and a signal reaches the children it forks (an AOF
// rewrite). It is signalled only through the PID it was started with, and
// never once it has been waited for, when that PID may belong to another
// process.
package childproc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Proc is one child process. Set the exported fields, then Start; Start
// again after it exited runs it anew with the same command line.
type Proc struct {
	Name string   // for logs and errors
	Bin  string   // the program
	Args []string // its arguments
	Env  []string // nil: the parent's environment
	Dir  string   // its working directory
	Log  string   // a file for its stdout and stderr, appended across restarts
	// KillWithParent asks the kernel to SIGKILL the child when the parent
	// dies (Linux), so that a killed harness leaves nothing on its ports.
	KillWithParent bool

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has been waited for
}

// Start runs the process; it does not wait for it to be ready.
func (p *Proc) Start() error {
	logf, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own descriptor
	fmt.Fprintf(logf, "=== %s start %s\n", p.Name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Dir = p.Dir
	cmd.Env = p.Env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if p.KillWithParent {
		killWithParent(cmd.SysProcAttr)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	return nil
}

func (p *Proc) current() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

// Pid returns the PID of the process now running (or last run), 0 before
// the first Start.
func (p *Proc) Pid() int {
	cmd, _ := p.current()
	if cmd == nil {
		return 0
	}
	return cmd.Process.Pid
}

// Done is closed when the process now running (or last run) has exited; nil
// before the first Start.
func (p *Proc) Done() <-chan struct{} {
	_, done := p.current()
	return done
}

// Exited reports whether the process has ended (or never started).
func (p *Proc) Exited() bool {
	_, done := p.current()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the process's group.
func (p *Proc) Signal(sig syscall.Signal) error {
	cmd, done := p.current()
	if cmd == nil {
		return errors.New(p.Name + ": not started")
	}
	select {
	case <-done:
		return errors.New(p.Name + ": not running")
	default:
	}
	return syscall.Kill(-cmd.Process.Pid, sig)
}

// Kill sends SIGKILL, as a crash would end the process (no shutdown save,
// no flush), and waits for it to exit.
func (p *Proc) Kill() error {
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.Done()
	return nil
}

// Stop freezes the process (SIGSTOP): its sockets stay open, nothing
// answers, as with a stalled host.
func (p *Proc) Stop() error { return p.Signal(syscall.SIGSTOP) }

// Cont resumes a process frozen by Stop.
func (p *Proc) Cont() error { return p.Signal(syscall.SIGCONT) }

// Term ends the process if it runs: SIGCONT (a stopped process cannot act
// on SIGTERM), SIGTERM, and SIGKILL if it has not exited within grace.
func (p *Proc) Term(grace time.Duration) {
	if p.Exited() {
		return
	}
	_ = p.Signal(syscall.SIGCONT)
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-p.Done():
	case <-time.After(grace):
		_ = p.Signal(syscall.SIGKILL)
		<-p.Done()
	}
}

// LogTail returns the last n bytes of the process's log.
func (p *Proc) LogTail(n int) string {
	b, _ := os.ReadFile(p.Log)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

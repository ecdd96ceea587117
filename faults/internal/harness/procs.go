package harness

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Proc is one child process (redis-server, a sentinel, a fenceproxy
// replica). It runs in its own process group, so that a terminal's ^C meant
// for the harness does not reach it and it can be signalled alone, and it is
// only ever signalled through the PID the harness started (never by name).
type Proc struct {
	Name string
	bin  string
	args []string
	env  []string // nil: the harness's environment
	dir  string
	log  string // stdout and stderr, appended across restarts

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has been waited for
}

// procs tracks every process the harness started, so that all of them are
// stopped however a scenario ends.
type procs struct {
	mu   sync.Mutex
	list []*Proc
}

func (ps *procs) add(p *Proc) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.list = append(ps.list, p)
}

// stopAll terminates every process still running, in reverse start order.
func (ps *procs) stopAll() {
	ps.mu.Lock()
	list := ps.list
	ps.list = nil
	ps.mu.Unlock()
	var wg sync.WaitGroup
	for i := len(list) - 1; i >= 0; i-- {
		wg.Add(1)
		go func(p *Proc) {
			defer wg.Done()
			p.Term(3 * time.Second)
		}(list[i])
	}
	wg.Wait()
}

// start runs the process; it does not wait for it to be ready.
func (p *Proc) start() error {
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own descriptor
	fmt.Fprintf(logf, "=== %s start %s\n", p.Name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Dir = p.dir
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logf, logf
	// Pdeathsig: if the harness itself is killed, the kernel ends its
	// children rather than leaving them on their ports.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
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

// Pid returns the PID of the process now running (or last run).
func (p *Proc) Pid() int {
	cmd, _ := p.current()
	if cmd == nil {
		return 0
	}
	return cmd.Process.Pid
}

// Exited reports whether the process has ended. Once it has, its PID may
// belong to someone else, so it is never signalled again.
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

// signal sends sig to the process group of the running process (its PID,
// Setpgid), so that a child it forked (an AOF rewrite) gets it too.
func (p *Proc) signal(sig syscall.Signal) error {
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

// Kill sends SIGKILL, as a crash would end the process, and waits for it.
func (p *Proc) Kill() error {
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	_, done := p.current()
	<-done
	return nil
}

// Stop freezes the process (SIGSTOP): its sockets stay open, nothing answers.
func (p *Proc) Stop() error { return p.signal(syscall.SIGSTOP) }

// Cont resumes a process frozen by Stop.
func (p *Proc) Cont() error { return p.signal(syscall.SIGCONT) }

// Term ends the process: SIGCONT (a stopped process cannot act on
// SIGTERM), SIGTERM, and SIGKILL after grace.
func (p *Proc) Term(grace time.Duration) {
	cmd, done := p.current()
	if cmd == nil || p.Exited() {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// LogTail returns the last n bytes of the process's log.
func (p *Proc) LogTail(n int) string {
	b, _ := os.ReadFile(p.log)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// freePort returns a port that was free a moment ago on 127.0.0.1; the
// caller's process may still lose it to another, hence the retries around
// every use.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitFor polls cond every 20ms until it returns nil, the process exits, or
// timeout passes.
func waitFor(p *Proc, timeout time.Duration, what string, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if p != nil && p.Exited() {
			return fmt.Errorf("%s: %s exited: %v\n%s", what, p.Name, err, p.LogTail(1500))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func mkdir(parts ...string) (string, error) {
	d := filepath.Join(parts...)
	return d, os.MkdirAll(d, 0o755)
}

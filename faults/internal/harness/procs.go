package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/childproc"
)

// Proc is one child process (redis-server, a sentinel, a fenceproxy
// replica): in its own process group, killed by the kernel if the harness
// dies, only ever signalled through the PID the harness started.
type Proc = childproc.Proc

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

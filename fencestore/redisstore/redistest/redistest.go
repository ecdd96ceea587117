package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/internal/childproc"
)

const (
	// startTimeout bounds the wait for a new server to answer PING; loading a
	// large AOF is not a concern in tests.
	startTimeout = 10 * time.Second
	// stopTimeout bounds the wait after SIGTERM before SIGKILL.
	stopTimeout = 5 * time.Second
)

// Server is one redis-server process.
type Server struct {
	port int
	dir  string
	args []string // the full command line after the program name
	env  []string // the process's environment (nil: the test's own)
	// ready, when set, replaces the plain PING that tells the server is up
	// (a TLS-only server, say).
	ready func(addr string) error

	proc *childproc.Proc
}

// Start starts redis-server on a free 127.0.0.1 port with
// --save "" and --appendonly no, then args (which override those), in
// t.TempDir(), and waits until it answers PING. The server is stopped when the
// test ends.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	return launch(t, "", func(port int, dir string) []string {
		return append(append([]string{"--save", "", "--appendonly", "no"}, args...), FixedArgs(port, dir)...)
	}, nil)
}

// StartEnv is Start with the server's environment: the test's own, then env
// (NAME=value; a later one wins), such as LD_PRELOAD or LC_ALL.
func StartEnv(t testing.TB, env []string, args ...string) *Server {
	t.Helper()
	return launchEnv(t, "", env, func(port int, dir string) []string {
		return append(append([]string{"--save", "", "--appendonly", "no"}, args...), FixedArgs(port, dir)...)
	}, nil)
}

// start runs the server and waits for PING; on failure the process is gone.
// A restart runs the same command line again.
func (s *Server) start(bin string) error {
	if s.proc == nil {
		s.proc = &childproc.Proc{Name: "redis-server", Bin: bin, Args: s.args, Env: s.env, Dir: s.dir,
			Log: filepath.Join(s.dir, "redis.log")}
	}
	if err := s.proc.Start(); err != nil {
		return err
	}
	if err := s.waitPing(s.proc.Done()); err != nil {
		_ = s.proc.Kill()
		return fmt.Errorf("redis-server %s: %w\n%s", strings.Join(s.args, " "), err, s.proc.LogTail(2000))
	}
	return nil
}

// waitPing polls with a raw PING, so that no client (and none of its
// goroutines) outlives the check.
func (s *Server) waitPing(done <-chan struct{}) error {
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-done:
			return errors.New("exited before answering PING")
		default:
		}
		check := Ping
		if s.ready != nil {
			check = s.ready
		}
		if check(s.Addr()) == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PONG within %v", startTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Ping sends PING on a raw connection of its own, so that no client (and
// none of its goroutines) outlives the check; -LOADING is not ready.
func Ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	// -LOADING while an AOF is read back: not ready yet.
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the server's port.
func (s *Server) Port() int { return s.port }

// URL returns redis://127.0.0.1:port/0.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Dir returns the server's working directory (AOF and RDB files, redis.log).
func (s *Server) Dir() string { return s.dir }

// Pid returns the process id of the server now running (or last run).
func (s *Server) Pid() int { return s.proc.Pid() }

// Client returns a client of the server with the options fenceproxy needs
// (ContextTimeoutEnabled, no retries, RESP2), closed when the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(s.Options())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Protocol is the RESP version fenceproxy's own client speaks unless told
// otherwise (cmd/fenceproxy's defaultRedisProtocol), which the tests' clients
// speak too.
const Protocol = 2

// Options returns client options for the server, as Client uses them:
// RESP2 (Protocol), as fenceproxy's own client.
func (s *Server) Options() *redis.Options {
	return &redis.Options{
		Addr:                  s.Addr(),
		Protocol:              Protocol,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
	}
}

// Kill sends SIGKILL and waits for the process to exit, as a crash would end
// it: no shutdown save, no AOF flush beyond what appendfsync already did.
func (s *Server) Kill() {
	_ = s.proc.Kill() // an error means it had already exited
	<-s.proc.Done()
}

// Stop freezes the server with SIGSTOP: connections stay open and nothing
// answers, as with a stalled host.
func (s *Server) Stop() { _ = s.proc.Stop() }

// Cont resumes a server frozen by Stop.
func (s *Server) Cont() { _ = s.proc.Cont() }

// Restart starts the server again on the same port, directory and arguments,
// so that an AOF written before is read back, and waits for PING. A server
// still running is stopped first.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.shutdown()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	// The port was ours a moment ago; if another process took it since, a
	// test that needs this very port cannot go on.
	if err := s.start(bin); err != nil {
		t.Fatalf("redistest: restart: %v", err)
	}
}

// shutdown ends the process: SIGCONT (a stopped process cannot act on
// SIGTERM), SIGTERM, and SIGKILL if it has not exited within stopTimeout.
func (s *Server) shutdown() { s.proc.Term(stopTimeout) }

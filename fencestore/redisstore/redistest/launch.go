package redistest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/internal/freeport"
)

// launch starts redis-server with the command line args(port, dir) on a
// free port, in dir (t.TempDir() if empty), and waits until ready(addr)
// (a plain PING if nil) succeeds. As Start, it tries a few ports, since a port
// found free may be taken before the server binds it, and stops the server
// when the test ends.
func launch(t testing.TB, dir string, args func(port int, dir string) []string, ready func(addr string) error) *Server {
	t.Helper()
	return launchEnv(t, dir, nil, args, ready)
}

// launchEnv is launch with env added to the test's environment (nil: the
// test's own).
func launchEnv(t testing.TB, dir string, env []string, args func(port int, dir string) []string, ready func(addr string) error) *Server {
	t.Helper()
	if env != nil {
		env = append(os.Environ(), env...)
	}
	bin := serverBin(t)
	if dir == "" {
		dir = t.TempDir()
	}
	var lastErr error
	for range 3 {
		port, err := freeport.Port()
		if err != nil {
			t.Fatalf("redistest: free port: %v", err)
		}
		s := &Server{port: port, dir: dir, args: args(port, dir), env: env, ready: ready}
		if lastErr = s.start(bin); lastErr == nil {
			t.Cleanup(s.shutdown)
			return s
		}
	}
	t.Fatalf("redistest: %v", lastErr)
	return nil
}

func serverBin(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("FENCE_SKIP_REDIS") == "1" {
			t.Skip("redis-server not found (FENCE_SKIP_REDIS=1)")
		}
		t.Fatal("redis-server not found: apt-get install -y redis-server")
	}
	return bin
}

// FixedArgs are the arguments every server started here ends with, so that
// the caller's arguments cannot move it off its port or directory.
func FixedArgs(port int, dir string) []string {
	return []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--daemonize", "no", "--logfile", ""}
}

// Poll calls cond every 20ms until it returns nil or timeout passes, and
// then fails the test with what, the last error and the time waited.
func Poll(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	t0 := time.Now()
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: %s: not within %v: %v", what, time.Since(t0).Round(time.Millisecond), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Do runs one command on a fresh connection to addr with a one-second
// bound and returns its reply; no client outlives the call. Options other
// than the address (credentials, TLS) come from base if not nil.
func Do(addr string, base *redis.Options, args ...any) (any, error) {
	opt := &redis.Options{}
	if base != nil {
		*opt = *base
	}
	opt.Addr = addr
	opt.MaxRetries = -1
	opt.DialerRetries = 1
	opt.ContextTimeoutEnabled = true
	opt.PoolSize = 1
	opt.DisableIdentity = true
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.Do(ctx, args...).Result()
}

// Info returns the fields of INFO section of the server at addr.
func Info(addr string, base *redis.Options, section string) (map[string]string, error) {
	r, err := Do(addr, base, "INFO", section)
	if err != nil {
		return nil, err
	}
	text, ok := r.(string)
	if !ok {
		// RESP3 verbatim strings arrive as strings too; anything else is odd.
		return nil, fmt.Errorf("INFO %s: unexpected reply %T", section, r)
	}
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if ok {
			m[k] = v
		}
	}
	return m, nil
}

// rawCommand sends one command in RESP over conn and reads the first line of
// the answer.
func rawCommand(conn net.Conn, args ...string) (string, error) {
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(line), nil
}

package harness

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Modelled on fencestore/redisstore/redistest (which needs a testing.TB and
// is being changed by others): the same command lines, readiness check and
// process handling, returning errors instead of failing a test.

func init() {
	// go-redis prints each failed dial of the harness's own clients (the
	// mark reader) to stderr; the faults are deliberate.
	redis.SetLogger(quietLogger{})
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// Redis is one redis-server (or sentinel) process on a fixed 127.0.0.1 port
// and directory, so that a restart reads back the same AOF.
type Redis struct {
	*Proc
	Port int
	Dir  string
}

// Addr returns host:port.
func (r *Redis) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.Port)) }

// startRedis starts redis-server with extra arguments (which come after
// --save "" --appendonly no and override them) in a new directory under
// h's work dir, and waits for PING.
func (h *Harness) startRedis(name string, extra ...string) (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found: apt-get install -y redis-server")
	}
	dir, err := mkdir(h.dir, name)
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 3 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		args := append([]string{"--save", "", "--appendonly", "no"}, extra...)
		args = append(args, fixedRedisArgs(port, dir)...)
		r := &Redis{Proc: &Proc{Name: name, Bin: bin, Args: args, Dir: dir, Log: filepath.Join(dir, "redis.log"), KillWithParent: true}, Port: port, Dir: dir}
		if lastErr = h.launchRedis(r); lastErr == nil {
			return r, nil
		}
	}
	return nil, lastErr
}

// fixedRedisArgs come last, so that no caller's argument moves a server off
// its port or directory.
func fixedRedisArgs(port int, dir string) []string {
	return []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--daemonize", "no", "--logfile", ""}
}

func (h *Harness) launchRedis(r *Redis) error {
	if err := r.Start(); err != nil {
		return err
	}
	h.procs.add(r.Proc)
	if err := waitFor(r.Proc, 10*time.Second, r.Name+" answers PING", func() error { return rawPing(r.Addr()) }); err != nil {
		_ = r.Kill()
		return err
	}
	return nil
}

// Restart starts the server again with the same port, directory and
// arguments (an AOF written before is read back) and waits for PING.
func (r *Redis) Restart() error {
	r.Term(3 * time.Second)
	if err := r.Start(); err != nil {
		return err
	}
	return waitFor(r.Proc, 15*time.Second, r.Name+" answers PING after restart", func() error { return rawPing(r.Addr()) })
}

// copyOf starts a throwaway redis-server (AOF on) on a copy of r's files,
// as a crashed server left them: what a restart reads back. The caller
// stops it.
func (h *Harness) copyOf(r *Redis, name string) (*Redis, error) {
	src := filepath.Join(r.Dir, "appendonlydir")
	dir, err := mkdir(h.dir, name+"-files")
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(src); err == nil {
		if out, err := exec.Command("cp", "-a", src, dir+"/").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("copy %s: %v: %s", src, err, out)
		}
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 3 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		args := append([]string{"--save", "", "--appendonly", "yes"}, fixedRedisArgs(port, dir)...)
		c := &Redis{Proc: &Proc{Name: name, Bin: bin, Args: args, Dir: dir, Log: filepath.Join(dir, "redis.log"), KillWithParent: true}, Port: port, Dir: dir}
		if lastErr = h.launchRedis(c); lastErr == nil {
			return c, nil
		}
	}
	return nil, lastErr
}

// rawPing sends PING without a client library, so that nothing outlives
// the check; -LOADING (an AOF being read back) is not ready.
func rawPing(addr string) error {
	line, err := rawCommand(addr, "PING")
	if err != nil {
		return err
	}
	if line != "+PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

func rawCommand(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(line), nil
}

// redisDo runs one command on a fresh connection with a one-second bound.
func redisDo(addr string, args ...any) (any, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1,
		ContextTimeoutEnabled: true, PoolSize: 1, DisableIdentity: true})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.Do(ctx, args...).Result()
}

// redisInfo returns the fields of an INFO section.
func redisInfo(addr, section string) (map[string]string, error) {
	r, err := redisDo(addr, "INFO", section)
	if err != nil {
		return nil, err
	}
	text, ok := r.(string)
	if !ok {
		return nil, fmt.Errorf("INFO %s: unexpected reply %T", section, r)
	}
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":"); ok {
			m[k] = v
		}
	}
	return m, nil
}

// startReplica starts a server replicating from masterAddr (which may be a
// toxiproxy in front of the master) and waits until its link is up and the
// master counts its acknowledgements (WAIT), as redistest.StartReplica does.
func (h *Harness) startReplica(name string, master *Redis, via string, extra ...string) (*Redis, error) {
	_, _ = redisDo(master.Addr(), "CONFIG", "SET", "repl-diskless-sync-delay", "0")
	host, port, _ := net.SplitHostPort(via)
	args := append([]string{"--repl-diskless-sync-delay", "0"}, extra...)
	args = append(args, "--replicaof", host, port)
	r, err := h.startRedis(name, args...)
	if err != nil {
		return nil, err
	}
	err = waitFor(r.Proc, 15*time.Second, name+" in sync with "+master.Addr(), func() error {
		info, err := redisInfo(r.Addr(), "replication")
		if err != nil {
			return err
		}
		if info["master_link_status"] != "up" {
			return fmt.Errorf("master_link_status %q", info["master_link_status"])
		}
		return waitAcks(master.Addr())
	})
	return r, err
}

// waitAcks publishes on the master (propagated, leaves no key) and waits up
// to 200ms until every connected replica acknowledges it.
func waitAcks(master string) error {
	info, err := redisInfo(master, "replication")
	if err != nil {
		return err
	}
	n, _ := strconv.Atoi(info["connected_slaves"])
	if n == 0 {
		return fmt.Errorf("%s has no connected replica", master)
	}
	c := redis.NewClient(&redis.Options{Addr: master, PoolSize: 1, MaxRetries: -1,
		DialerRetries: 1, DisableIdentity: true, ContextTimeoutEnabled: true})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var acked *redis.IntCmd
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Publish(ctx, "faults:sync", "1")
		acked = redis.NewIntCmd(ctx, "wait", n, 200)
		return p.Process(ctx, acked)
	}); err != nil {
		return err
	}
	if acked.Val() < int64(n) {
		return fmt.Errorf("%d of %d replicas acknowledged", acked.Val(), n)
	}
	return nil
}

// sentinelGroup is n sentinels monitoring one master.
type sentinelGroup struct {
	name  string
	nodes []*Redis
}

func (g *sentinelGroup) addrs() []string {
	out := make([]string, len(g.nodes))
	for i, s := range g.nodes {
		out[i] = s.Addr()
	}
	return out
}

// startSentinels starts n sentinels (quorum a majority) watching master
// and waits until each knows its peers and the master's replicas, so that a
// failover can be authorised and has a replica to promote.
func (h *Harness) startSentinels(n int, name string, master *Redis, downAfter, failoverTimeout time.Duration) (*sentinelGroup, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found: apt-get install -y redis-server")
	}
	g := &sentinelGroup{name: name}
	for i := range n {
		dir, err := mkdir(h.dir, fmt.Sprintf("sentinel%d", i))
		if err != nil {
			return nil, err
		}
		var s *Redis
		var lastErr error
		for range 3 {
			port, err := freePort()
			if err != nil {
				return nil, err
			}
			conf := filepath.Join(dir, "sentinel.conf")
			text := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d\n"+
				"sentinel down-after-milliseconds %s %d\n"+
				"sentinel failover-timeout %s %d\n",
				name, master.Port, n/2+1, name, downAfter.Milliseconds(), name, failoverTimeout.Milliseconds())
			if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
				return nil, err
			}
			args := append([]string{conf, "--sentinel"}, fixedRedisArgs(port, dir)...)
			s = &Redis{Proc: &Proc{Name: fmt.Sprintf("sentinel%d", i), Bin: bin, Args: args, Dir: dir,
				Log: filepath.Join(dir, "sentinel.log"), KillWithParent: true}, Port: port, Dir: dir}
			if lastErr = h.launchRedis(s); lastErr == nil {
				break
			}
		}
		if lastErr != nil {
			return nil, lastErr
		}
		g.nodes = append(g.nodes, s)
	}
	info, err := redisInfo(master.Addr(), "replication")
	if err != nil {
		return nil, err
	}
	replicas, _ := strconv.Atoi(info["connected_slaves"])
	for _, s := range g.nodes {
		err := waitFor(s.Proc, 20*time.Second, s.Name+" sees its peers and the replicas", func() error {
			peers, err := redisDo(s.Addr(), "SENTINEL", "SENTINELS", name)
			if err != nil {
				return err
			}
			if got := replyLen(peers); got != n-1 {
				return fmt.Errorf("knows %d other sentinels, want %d", got, n-1)
			}
			reps, err := redisDo(s.Addr(), "SENTINEL", "REPLICAS", name)
			if err != nil {
				return err
			}
			if got := replyLen(reps); got != replicas {
				return fmt.Errorf("knows %d replicas, want %d", got, replicas)
			}
			_, err = redisDo(s.Addr(), "SENTINEL", "CKQUORUM", name)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return g, nil
}

func replyLen(r any) int {
	switch v := r.(type) {
	case []any:
		return len(v)
	case map[any]any:
		return len(v)
	}
	return -1
}

// masters returns the master each sentinel names (an error for one that
// does not answer).
func (g *sentinelGroup) masters() ([]string, error) {
	var out []string
	for _, s := range g.nodes {
		r, err := redisDo(s.Addr(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", g.name)
		if err != nil {
			return nil, err
		}
		a, ok := r.([]any)
		if !ok || len(a) != 2 {
			return nil, fmt.Errorf("%s: unexpected reply %#v", s.Addr(), r)
		}
		out = append(out, net.JoinHostPort(fmt.Sprint(a[0]), fmt.Sprint(a[1])))
	}
	return out, nil
}

// waitMaster waits until every sentinel names want and want says it is a
// master.
func (g *sentinelGroup) waitMaster(want string, timeout time.Duration) error {
	return waitFor(nil, timeout, "sentinels name "+want+" master", func() error {
		ms, err := g.masters()
		if err != nil {
			return err
		}
		for _, m := range ms {
			if m != want {
				return fmt.Errorf("a sentinel names %s", m)
			}
		}
		info, err := redisInfo(want, "replication")
		if err != nil {
			return err
		}
		if info["role"] != "master" {
			return fmt.Errorf("%s has role %s", want, info["role"])
		}
		return nil
	})
}

package harness

import (
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

	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
	"github.com/fenceproxy/fenceproxy/internal/freeport"
)

// The servers are started as fencestore/redisstore/redistest starts them
// (its FixedArgs, Ping, Do, Info, WaitAcks and internal/childproc), but by
// the harness itself: redistest's Start and friends fail a testing.TB, and a
// scenario needs errors it can report.

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
		port, err := freeport.Port()
		if err != nil {
			return nil, err
		}
		args := append([]string{"--save", "", "--appendonly", "no"}, extra...)
		args = append(args, redistest.FixedArgs(port, dir)...)
		r := &Redis{Proc: &Proc{Name: name, Bin: bin, Args: args, Dir: dir, Log: filepath.Join(dir, "redis.log"), KillWithParent: true}, Port: port, Dir: dir}
		if h.redisEnv != nil {
			r.Env = append(os.Environ(), h.redisEnv...)
		}
		if lastErr = h.launchRedis(r); lastErr == nil {
			return r, nil
		}
	}
	return nil, lastErr
}

func (h *Harness) launchRedis(r *Redis) error {
	if err := r.Start(); err != nil {
		return err
	}
	h.procs.add(r.Proc)
	if err := waitFor(r.Proc, 10*time.Second, r.Name+" answers PING", func() error { return redistest.Ping(r.Addr()) }); err != nil {
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
	return waitFor(r.Proc, 15*time.Second, r.Name+" answers PING after restart", func() error { return redistest.Ping(r.Addr()) })
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
		port, err := freeport.Port()
		if err != nil {
			return nil, err
		}
		args := append([]string{"--save", "", "--appendonly", "yes"}, redistest.FixedArgs(port, dir)...)
		c := &Redis{Proc: &Proc{Name: name, Bin: bin, Args: args, Dir: dir, Log: filepath.Join(dir, "redis.log"), KillWithParent: true}, Port: port, Dir: dir}
		if lastErr = h.launchRedis(c); lastErr == nil {
			return c, nil
		}
	}
	return nil, lastErr
}

// startReplica starts a server replicating from masterAddr (which may be a
// toxiproxy in front of the master) and waits until its link is up and the
// master counts its acknowledgements (WAIT), as redistest.StartReplica does.
func (h *Harness) startReplica(name string, master *Redis, via string, extra ...string) (*Redis, error) {
	_, _ = redistest.Do(master.Addr(), nil, "CONFIG", "SET", "repl-diskless-sync-delay", "0")
	host, port, _ := net.SplitHostPort(via)
	args := append([]string{"--repl-diskless-sync-delay", "0"}, extra...)
	args = append(args, "--replicaof", host, port)
	r, err := h.startRedis(name, args...)
	if err != nil {
		return nil, err
	}
	err = waitFor(r.Proc, 15*time.Second, name+" in sync with "+master.Addr(), func() error {
		info, err := redistest.Info(r.Addr(), nil, "replication")
		if err != nil {
			return err
		}
		if info["master_link_status"] != "up" {
			return fmt.Errorf("master_link_status %q", info["master_link_status"])
		}
		return redistest.WaitAcks(master.Addr())
	})
	return r, err
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
			port, err := freeport.Port()
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
			args := append([]string{conf, "--sentinel"}, redistest.FixedArgs(port, dir)...)
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
	info, err := redistest.Info(master.Addr(), nil, "replication")
	if err != nil {
		return nil, err
	}
	replicas, _ := strconv.Atoi(info["connected_slaves"])
	for _, s := range g.nodes {
		err := waitFor(s.Proc, 20*time.Second, s.Name+" sees its peers and the replicas", func() error {
			peers, err := redistest.Do(s.Addr(), nil, "SENTINEL", "SENTINELS", name)
			if err != nil {
				return err
			}
			if got := redistest.ReplyLen(peers); got != n-1 {
				return fmt.Errorf("knows %d other sentinels, want %d", got, n-1)
			}
			reps, err := redistest.Do(s.Addr(), nil, "SENTINEL", "REPLICAS", name)
			if err != nil {
				return err
			}
			if got := redistest.ReplyLen(reps); got != replicas {
				return fmt.Errorf("knows %d replicas, want %d", got, replicas)
			}
			_, err = redistest.Do(s.Addr(), nil, "SENTINEL", "CKQUORUM", name)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return g, nil
}

// masters returns the master each sentinel names (an error for one that
// does not answer).
func (g *sentinelGroup) masters() ([]string, error) {
	var out []string
	for _, s := range g.nodes {
		r, err := redistest.Do(s.Addr(), nil, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", g.name)
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
	_, err := g.waitAgreed("sentinels name "+want+" master", timeout, func(m string) bool { return m == want })
	return err
}

// waitNewMaster waits until every sentinel names one master other than
// old, and it says it is a master; it returns its address.
func (g *sentinelGroup) waitNewMaster(old string, timeout time.Duration) (string, error) {
	return g.waitAgreed("sentinels name a new master", timeout, func(m string) bool { return m != old })
}

// waitAgreed waits until every sentinel names one master that ok accepts,
// and it says it is a master; it returns its address.
func (g *sentinelGroup) waitAgreed(what string, timeout time.Duration, ok func(string) bool) (string, error) {
	var got string
	err := waitFor(nil, timeout, what, func() error {
		ms, err := g.masters()
		if err != nil {
			return err
		}
		for _, m := range ms {
			if m != ms[0] || !ok(m) {
				return fmt.Errorf("sentinels name %s", strings.Join(ms, ","))
			}
		}
		info, err := redistest.Info(ms[0], nil, "replication")
		if err != nil {
			return err
		}
		if info["role"] != "master" {
			return fmt.Errorf("%s has role %s", ms[0], info["role"])
		}
		got = ms[0]
		return nil
	})
	return got, err
}

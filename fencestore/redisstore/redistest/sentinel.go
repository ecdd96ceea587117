package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartReplica starts a server (as Start, with args) replicating master, and
// waits until its link to the master is up and it acknowledges writes as
// WAIT counts them. A full synchronisation is diskless by default and waits
// repl-diskless-sync-delay (5s) for more replicas, so StartReplica sets that
// delay to 0 on master (CONFIG SET, if CONFIG is allowed) and on the replica,
// which may be promoted.
func StartReplica(t testing.TB, master *Server, args ...string) *Server {
	t.Helper()
	_, _ = Do(master.Addr(), nil, "CONFIG", "SET", "repl-diskless-sync-delay", "0")
	args = append([]string{"--repl-diskless-sync-delay", "0"}, args...)
	args = append(args, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port()))
	r := Start(t, args...)
	Poll(t, 10*time.Second, "replica "+r.Addr()+" in sync with "+master.Addr(), func() error {
		info, err := Info(r.Addr(), nil, "replication")
		if err != nil {
			return err
		}
		if info["master_link_status"] != "up" {
			return fmt.Errorf("master_link_status %q", info["master_link_status"])
		}
		// WAIT counts a replica only once it has acknowledged an offset,
		// and after a diskless sync the master sends it nothing until its
		// first REPLCONF ACK, up to a second later: write something to the
		// replication stream (PUBLISH is propagated, and leaves no key) and
		// wait until every replica of the master acknowledges it.
		return WaitAcks(master.Addr())
	})
	return r
}

// WaitAcks publishes on the master at addr (PUBLISH is replicated and
// leaves no key) and waits up to 200ms until every replica connected to it
// has acknowledged; a master without a connected replica is an error.
func WaitAcks(addr string) error {
	minfo, err := Info(addr, nil, "replication")
	if err != nil {
		return err
	}
	n, _ := strconv.Atoi(minfo["connected_slaves"])
	if n == 0 {
		return fmt.Errorf("%s has no connected replica", addr)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MaxRetries: -1,
		DialerRetries: 1, DisableIdentity: true, ContextTimeoutEnabled: true})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var acked *redis.IntCmd
	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Publish(ctx, "redistest:sync", "1")
		acked = redis.NewIntCmd(ctx, "wait", n, 200) // Pipeliner lacks Wait
		return p.Process(ctx, acked)
	})
	if err != nil {
		return err
	}
	if acked.Val() < int64(n) {
		return fmt.Errorf("%d of %d replicas acknowledged", acked.Val(), n)
	}
	return nil
}

// SentinelOptions tune StartSentinels; zero values take the defaults noted.
type SentinelOptions struct {
	Quorum          int           // default: a majority of the sentinels
	DownAfter       time.Duration // down-after-milliseconds, default 500ms
	FailoverTimeout time.Duration // failover-timeout, default 2s
}

// Sentinels is a group of sentinels monitoring one master.
type Sentinels struct {
	Name  string
	Nodes []*Server
}

// StartSentinels starts n sentinels (redis-server sentinel.conf --sentinel),
// each with its own config file in its own t.TempDir(), monitoring master
// under name, and waits until each knows the other n-1 and the master's
// replicas (as the master's INFO lists them), so that a failover can be
// authorised and has a replica to promote.
func StartSentinels(t testing.TB, n int, name string, master *Server, opts SentinelOptions) *Sentinels {
	t.Helper()
	if opts.Quorum == 0 {
		opts.Quorum = n/2 + 1
	}
	if opts.DownAfter == 0 {
		opts.DownAfter = 500 * time.Millisecond
	}
	if opts.FailoverTimeout == 0 {
		opts.FailoverTimeout = 2 * time.Second
	}
	g := &Sentinels{Name: name}
	for range n {
		dir := t.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		s := launch(t, dir, func(port int, dir string) []string {
			// A sentinel rewrites its config file (the state it learns), so
			// each attempt starts from a fresh one.
			text := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d\n"+
				"sentinel down-after-milliseconds %s %d\n"+
				"sentinel failover-timeout %s %d\n",
				name, master.Port(), opts.Quorum,
				name, opts.DownAfter.Milliseconds(),
				name, opts.FailoverTimeout.Milliseconds())
			if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			// The config file must come first.
			return append([]string{conf, "--sentinel"}, FixedArgs(port, dir)...)
		}, nil)
		g.Nodes = append(g.Nodes, s)
	}
	minfo, err := Info(master.Addr(), nil, "replication")
	if err != nil {
		t.Fatalf("redistest: INFO of master %s: %v", master.Addr(), err)
	}
	replicas, _ := strconv.Atoi(minfo["connected_slaves"])
	for _, s := range g.Nodes {
		Poll(t, 15*time.Second, "sentinel "+s.Addr()+" sees its peers and replicas", func() error {
			peers, err := Do(s.Addr(), nil, "SENTINEL", "SENTINELS", name)
			if err != nil {
				return err
			}
			if got := ReplyLen(peers); got != n-1 {
				return fmt.Errorf("knows %d other sentinels, want %d", got, n-1)
			}
			reps, err := Do(s.Addr(), nil, "SENTINEL", "REPLICAS", name)
			if err != nil {
				return err
			}
			if got := ReplyLen(reps); got != replicas {
				return fmt.Errorf("knows %d replicas, want %d", got, replicas)
			}
			_, err = Do(s.Addr(), nil, "SENTINEL", "CKQUORUM", name)
			return err
		})
	}
	return g
}

// ReplyLen is the number of elements of an array or map reply, -1 for
// anything else.
func ReplyLen(r any) int {
	switch v := r.(type) {
	case []any:
		return len(v)
	case map[any]any:
		return len(v)
	}
	return -1
}

// Addrs returns the sentinels' host:port addresses.
func (g *Sentinels) Addrs() []string {
	out := make([]string, len(g.Nodes))
	for i, s := range g.Nodes {
		out[i] = s.Addr()
	}
	return out
}

// MasterAddr asks the sentinels in turn (SENTINEL get-master-addr-by-name)
// and returns the first answer.
func (g *Sentinels) MasterAddr() (string, error) {
	var errs []error
	for _, s := range g.Nodes {
		r, err := Do(s.Addr(), nil, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", g.Name)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.Addr(), err))
			continue
		}
		a, ok := r.([]any)
		if !ok || len(a) != 2 {
			errs = append(errs, fmt.Errorf("%s: unexpected reply %#v", s.Addr(), r))
			continue
		}
		return net.JoinHostPort(fmt.Sprint(a[0]), fmt.Sprint(a[1])), nil
	}
	return "", errors.Join(errs...)
}

// WaitMaster waits until every sentinel names want as the master.
func (g *Sentinels) WaitMaster(t testing.TB, want string, timeout time.Duration) {
	t.Helper()
	Poll(t, timeout, "sentinels name "+want+" master of "+g.Name, func() error {
		for _, s := range g.Nodes {
			r, err := Do(s.Addr(), nil, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", g.Name)
			if err != nil {
				return err
			}
			a, ok := r.([]any)
			if !ok || len(a) != 2 {
				return fmt.Errorf("%s: unexpected reply %#v", s.Addr(), r)
			}
			if got := net.JoinHostPort(fmt.Sprint(a[0]), fmt.Sprint(a[1])); got != want {
				return fmt.Errorf("%s names %s", s.Addr(), got)
			}
		}
		return nil
	})
}

// WaitRole waits until the server at addr reports role (INFO replication):
// "master", or "slave" with its link up.
func WaitRole(t testing.TB, addr string, base *redis.Options, role string, timeout time.Duration) {
	t.Helper()
	Poll(t, timeout, addr+" has role "+role, func() error {
		info, err := Info(addr, base, "replication")
		if err != nil {
			return err
		}
		if info["role"] != role {
			return fmt.Errorf("role %q", info["role"])
		}
		if role == "slave" && info["master_link_status"] != "up" {
			return fmt.Errorf("master_link_status %q", info["master_link_status"])
		}
		return nil
	})
}

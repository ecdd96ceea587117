package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
	"github.com/fenceproxy/fenceproxy/fencestore/storetest"
)

// newClusterStore returns a store on a cluster client of cluster, under a key
// prefix of its own unless opts has one, closed when the test ends. dial, if
// not nil, is the client's Dialer.
func newClusterStore(t testing.TB, cluster *redistest.Cluster, opts redisstore.Options,
	dial func(ctx context.Context, network, addr string) (net.Conn, error),
) (*redisstore.Store, *redis.ClusterClient, string) {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 cluster.Addrs(),
		Protocol:              redistest.Protocol,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		Dialer:                dial,
	})
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = fmt.Sprintf("fence:%d:", prefixes.Add(1))
	}
	s := redisstore.New(cc, opts)
	t.Cleanup(func() { _ = s.Close() })
	return s, cc, opts.KeyPrefix
}

// newRelayedClusterStore is newClusterStore with every node reached through
// a relay of its own (by the node's address).
func newRelayedClusterStore(t testing.TB, cluster *redistest.Cluster, opts redisstore.Options,
) (*redisstore.Store, *redis.ClusterClient, string, map[string]*relay) {
	t.Helper()
	relays := map[string]*relay{}
	for _, addr := range cluster.Addrs() {
		relays[addr] = startRelay(t, addr)
	}
	s, cc, prefix := newClusterStore(t, cluster, opts,
		func(ctx context.Context, network, addr string) (net.Conn, error) {
			if r, ok := relays[addr]; ok {
				addr = r.ln.Addr().String()
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		})
	return s, cc, prefix, relays
}

// The suite on a cluster, where admissions go to the node clients of the
// masters, batched (grouped by node) and not.
func TestClusterConformance(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	for _, tc := range []struct {
		name string
		opts redisstore.Options
	}{{"batched", redisstore.Options{}}, {"unbatched", redisstore.Options{MaxBatch: -1}}} {
		t.Run(tc.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) fencestore.Store {
				s, _, _ := newClusterStore(t, cluster, tc.opts, nil)
				return s
			})
		})
	}
}

// A ">" admission whose reply is lost on its way back from the node: the
// script ran, so no retry may run it again (it would be refused by its own
// mark, a 409 claiming a newer holder wrote). The caller gets an error,
// the script ran once, and the next token is admitted.
func TestClusterLostReply(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	for _, tc := range []struct {
		name string
		opts redisstore.Options
	}{{"batched", redisstore.Options{}}, {"unbatched", redisstore.Options{MaxBatch: -1}}} {
		t.Run(tc.name, func(t *testing.T) {
			s, cc, prefix, relays := newRelayedClusterStore(t, cluster, tc.opts)
			ctx := t.Context()
			const res = "orders/1"
			node, err := cc.MasterForKey(ctx, prefix+res)
			if err != nil {
				t.Fatal(err)
			}
			addr := node.Options().Addr
			r := relays[addr]
			if r == nil {
				t.Fatalf("the key's master %s has no relay", addr)
			}
			// The first admission caches the script on the node, so the one
			// whose reply is lost is a single EVALSHA.
			if d, err := s.Admit(ctx, fencestore.Admission{Resource: res, Token: 1, Compare: fencestore.Greater}); err != nil || !d.Admitted {
				t.Fatalf("Admit(1) = %+v, %v; want admitted", d, err)
			}
			before := scriptRuns(t, addr)
			r.armed.Store(true)
			d, err := s.Admit(ctx, fencestore.Admission{Resource: res, Token: 2, Compare: fencestore.Greater})
			if !errors.Is(err, fencestore.ErrUnavailable) {
				t.Errorf("Admit(2) with its reply lost = %+v, %v; want an error wrapping ErrUnavailable", d, err)
			} else {
				t.Log(err)
			}
			if n := r.dropped.Load(); n != 1 {
				t.Fatalf("the relay dropped %d replies, want 1", n)
			}
			if n := scriptRuns(t, addr) - before; n != 1 {
				t.Errorf("the node ran the script %d times for Admit(2), want once", n)
			}
			if got, err := redistest.Do(addr, nil, "GET", prefix+res); err != nil || got != "2" {
				t.Errorf("GET %s = %v, %v; want 2 (the lost admission ran)", prefix+res, got, err)
			}
			if d, err := s.Admit(ctx, fencestore.Admission{Resource: res, Token: 3, Compare: fencestore.Greater}); err != nil || !d.Admitted || d.Mark != 3 {
				t.Errorf("Admit(3) after the lost reply = %+v, %v; want admitted", d, err)
			}
		})
	}
}

// A release a Cluster node acknowledged and then lost (as a replica
// promoted without it would have lost it) is sent again once an admission
// on the Cluster fails, though the failing node is not the one holding the
// subscription (whose coming back sends them again too): the lost entry is
// gone within seconds, instead of holding its resource's newer requests for
// their bound.
func TestClusterLostReleaseSentAgain(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	s, cc, prefix, relays := newRelayedClusterStore(t, cluster, redisstore.Options{})
	ctx := t.Context()
	sub, err := cc.MasterForKey(ctx, prefix+"inflight") // the releases' channel
	if err != nil {
		t.Fatal(err)
	}
	var res, addr string
	for i := 0; addr == "" || addr == sub.Options().Addr; i++ {
		res = "orders/" + strconv.Itoa(i)
		node, err := cc.MasterForKey(ctx, prefix+res)
		if err != nil {
			t.Fatal(err)
		}
		addr = node.Options().Addr
	}
	e := releasedEntry(t, s, res, addr, prefix)
	// The node loses the release, as a promoted replica that missed it.
	e.put(t, addr)
	// An admission on that node fails: its reply is lost on the way.
	relays[addr].armed.Store(true)
	if _, err := s.Admit(ctx, fencestore.Admission{Resource: res, Token: 2, Compare: fencestore.Greater}); !errors.Is(err, fencestore.ErrUnavailable) {
		t.Fatalf("Admit(2) with its reply lost = %v, want unavailable", err)
	}
	// The entry's own bound is a minute: gone well before, it was released
	// again.
	e.waitGone(t, addr, 10*time.Second, "the lost release sent again")
}

// flightEntry is one in-flight entry as Redis holds it: its key, member
// and score.
type flightEntry struct {
	key, member string
	score       any
}

// releasedEntry admits token 1 on res with a barrier (a bound of a
// minute), reads its entry on the node at addr, releases it and waits
// until the node holds it no longer: the entry, to write back as a node
// that lost the release holds it.
func releasedEntry(t testing.TB, s *redisstore.Store, res, addr, prefix string) flightEntry {
	t.Helper()
	d, err := s.Admit(t.Context(), fencestore.Admission{Resource: res, Token: 1, Compare: fencestore.Greater, Flight: time.Minute})
	if err != nil || !d.Admitted || !d.Flight.Registered() {
		t.Fatalf("Admit(1) = %+v, %v; want admitted in flight", d, err)
	}
	e := onlyEntry(t, addr, prefix)
	s.Release(d.Flight)
	e.waitGone(t, addr, 5*time.Second, "the release taken")
	return e
}

// onlyEntry reads the one in-flight entry of the store with prefix on the
// node at addr.
func onlyEntry(t testing.TB, addr, prefix string) flightEntry {
	t.Helper()
	// The in-flight key: the one sorted set of this store on the node.
	reply, err := redistest.Do(addr, nil, "SCAN", "0", "MATCH", "*"+prefix+"*", "TYPE", "zset", "COUNT", "100000")
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := reply.([]any)[1].([]any)
	if len(keys) != 1 {
		t.Fatalf("in-flight keys on %s: %v, want one", addr, keys)
	}
	fkey := keys[0].(string)
	entry, err := redistest.Do(addr, nil, "ZRANGE", fkey, "0", "-1", "WITHSCORES")
	if err != nil {
		t.Fatal(err)
	}
	pair := entry.([]any) // RESP2: member, score; RESP3: [member, score]
	if p, ok := pair[0].([]any); ok {
		pair = p
	}
	return flightEntry{key: fkey, member: pair[0].(string), score: pair[1]}
}

// put writes the entry back on the node at addr, as a node that lost its
// release holds it.
func (e flightEntry) put(t testing.TB, addr string) {
	t.Helper()
	if _, err := redistest.Do(addr, nil, "ZADD", e.key, fmt.Sprint(e.score), e.member); err != nil {
		t.Fatal(err)
	}
}

// waitGone waits until the node at addr holds no entry in e's key.
func (e flightEntry) waitGone(t testing.TB, addr string, timeout time.Duration, what string) {
	t.Helper()
	redistest.Poll(t, timeout, what, func() error {
		n, err := redistest.Do(addr, nil, "ZCARD", e.key)
		if err != nil || n.(int64) != 0 {
			return fmt.Errorf("%v entries, %v", n, err)
		}
		return nil
	})
}

// scriptRuns is how many EVAL and EVALSHA commands the server at addr has
// run.
func scriptRuns(t testing.TB, addr string) int {
	t.Helper()
	stats, err := redistest.Info(addr, nil, "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, cmd := range []string{"cmdstat_eval", "cmdstat_evalsha"} {
		calls, _, _ := strings.Cut(strings.TrimPrefix(stats[cmd], "calls="), ",")
		if calls != "" {
			c, err := strconv.Atoi(calls)
			if err != nil {
				t.Fatalf("%s: %q", cmd, stats[cmd])
			}
			n += c
		}
	}
	return n
}

// relay is a TCP proxy on 127.0.0.1 in front of one Redis node. Once armed,
// it passes the next request that holds an EVAL or EVALSHA on to the node
// and then closes the client's connection instead of passing the reply on:
// the script ran, and the client cannot know it. (A clean close, which the
// client reads as EOF: go-redis retries that, not a reset.)
type relay struct {
	ln      net.Listener
	target  string
	armed   atomic.Bool
	dropped atomic.Int32

	mu     sync.Mutex
	closed bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

// startRelay starts a relay to target, stopped when the test ends.
func startRelay(t testing.TB, target string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, target: target}
	r.wg.Go(r.accept)
	t.Cleanup(r.close)
	return r
}

func (r *relay) accept() {
	for {
		client, err := r.ln.Accept()
		if err != nil {
			return
		}
		node, err := net.DialTimeout("tcp", r.target, time.Second)
		if err != nil {
			client.Close()
			continue
		}
		if !r.track(client, node) {
			return
		}
		var dropNext atomic.Bool
		r.wg.Go(func() {
			buf := make([]byte, 64<<10)
			for {
				n, err := client.Read(buf)
				if n > 0 {
					if bytes.Contains(bytes.ToLower(buf[:n]), []byte("eval")) && r.armed.CompareAndSwap(true, false) {
						dropNext.Store(true)
					}
					if _, err := node.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					node.Close()
					return
				}
			}
		})
		r.wg.Go(func() {
			buf := make([]byte, 64<<10)
			for {
				n, err := node.Read(buf)
				if n > 0 && dropNext.Load() {
					r.dropped.Add(1)
					client.Close()
					node.Close()
					return
				}
				if n > 0 {
					if _, err := client.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					client.Close()
					return
				}
			}
		})
	}
}

// track records a connection pair for close, or closes it if the relay is
// already closed.
func (r *relay) track(c ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		for _, x := range c {
			x.Close()
		}
		return false
	}
	r.conns = append(r.conns, c...)
	return true
}

func (r *relay) close() {
	r.mu.Lock()
	r.closed = true
	r.ln.Close()
	for _, c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// Redirections: an admission sent to a node that no longer serves its slot
// (MOVED), or whose key has already left a migrating slot (ASK), did not run.
// It is answered as an error, nothing is written, and the store asks for a
// fresh slot map, so the admissions after it reach the new owner.
func TestClusterRedirect(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	s, cc, prefix := newClusterStore(t, cluster, redisstore.Options{}, nil)
	ctx := t.Context()
	const res = "orders/moving"
	key := prefix + res
	node, err := cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	src := node.Options().Addr
	var dst, other string
	for _, a := range cluster.Addrs() {
		switch {
		case a == src:
		case dst == "":
			dst = a
		default:
			other = a
		}
	}
	slot := fmt.Sprint(nodeDo(t, src, "CLUSTER", "KEYSLOT", key))
	srcID, dstID := fmt.Sprint(nodeDo(t, src, "CLUSTER", "MYID")), fmt.Sprint(nodeDo(t, dst, "CLUSTER", "MYID"))
	nothingWritten := func(what string) {
		t.Helper()
		for _, a := range []string{src, dst} {
			if n := nodeDo(t, a, "CLUSTER", "COUNTKEYSINSLOT", slot); n != int64(0) {
				t.Fatalf("%s: node %s holds %v keys in slot %s, want none", what, a, n, slot)
			}
		}
	}

	// The slot migrates from src to dst, and key is not on src: src answers
	// ASK.
	nodeDo(t, dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID)
	nodeDo(t, src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID)
	if d, err := s.Admit(ctx, fencestore.Admission{Resource: res, Token: 5, Compare: fencestore.Greater}); !errors.Is(err, fencestore.ErrUnavailable) {
		t.Fatalf("Admit during the migration = %+v, %v; want an error wrapping ErrUnavailable (ASK)", d, err)
	} else {
		t.Log(err)
	}
	nothingWritten("after ASK")

	// dst owns the slot now. A store whose client read the slot map before
	// that is sent to src, which answers MOVED.
	stale, staleCC, _ := newClusterStore(t, cluster, redisstore.Options{KeyPrefix: prefix}, nil)
	if n, err := staleCC.MasterForKey(ctx, key); err != nil || n.Options().Addr != src {
		t.Fatalf("the stale client maps the key to %v (%v), want %s", n, err, src)
	}
	for _, a := range []string{dst, src, other} {
		nodeDo(t, a, "CLUSTER", "SETSLOT", slot, "NODE", dstID)
	}
	if d, err := stale.Admit(ctx, fencestore.Admission{Resource: res, Token: 6, Compare: fencestore.Greater}); !errors.Is(err, fencestore.ErrUnavailable) {
		t.Fatalf("Admit with a stale slot map = %+v, %v; want an error wrapping ErrUnavailable (MOVED)", d, err)
	} else {
		t.Log(err)
	}
	nothingWritten("after MOVED")

	// The failure asked for a fresh slot map: the next admissions reach dst.
	redistest.Poll(t, 5*time.Second, "an admission after MOVED", func() error {
		d, err := stale.Admit(ctx, fencestore.Admission{Resource: res, Token: 7, Compare: fencestore.Greater})
		if err != nil {
			return err
		}
		if !d.Admitted {
			return fmt.Errorf("refused: %+v", d)
		}
		return nil
	})
	if got := nodeDo(t, dst, "GET", key); got != "7" {
		t.Fatalf("GET %s on %s = %v, want 7", key, dst, got)
	}
}

// nodeDo runs one command on the node at addr, failing the test on an error.
func nodeDo(t testing.TB, addr string, args ...any) any {
	t.Helper()
	r, err := redistest.Do(addr, nil, args...)
	if err != nil {
		t.Fatalf("%s %v: %v", addr, args, err)
	}
	return r
}

// TestClusterStalledShardHoldsNoOther: a master that stops answering
// (SIGSTOP: a host that crashed, whose connections neither answer nor
// reset) holds back only the admissions of its own slots. Those of the
// other masters, queued beside them in the same batches, are answered at
// once: each master's pipelines run in a lane of their own, and no batch
// waits for a slow master's answer before it answers the others or before
// its worker takes the next batch.
func TestClusterStalledShardHoldsNoOther(t *testing.T) {
	// A node timeout well past the test's window: the other masters must
	// not mark the stopped one failed (and, with full coverage required,
	// refuse every slot) while the test still counts on them.
	cluster := redistest.StartCluster(t, 3, "--cluster-node-timeout", "15000")
	s, cc, prefix := newClusterStore(t, cluster, redisstore.Options{}, nil)
	ctx := t.Context()
	stalled := cluster.Nodes[0]
	var onStalled, healthy []string
	for i := 0; len(onStalled) < 4 || len(healthy) < 4; i++ {
		res := "orders/" + strconv.Itoa(i)
		node, err := cc.MasterForKey(ctx, prefix+res)
		if err != nil {
			t.Fatal(err)
		}
		if node.Options().Addr == stalled.Addr() {
			if len(onStalled) < 4 {
				onStalled = append(onStalled, res)
			}
		} else if len(healthy) < 4 {
			healthy = append(healthy, res)
		}
	}
	admit := func(res string, token uint64) error {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		d, err := s.Admit(actx, fencestore.Admission{Resource: res, Token: token, Flight: time.Minute})
		if err != nil {
			return err
		}
		if !d.Admitted {
			return fmt.Errorf("token %d refused: %+v", token, d)
		}
		s.Release(d.Flight)
		return nil
	}
	// Every master's connections and the slot map in place first.
	for _, res := range append(append([]string{}, onStalled...), healthy...) {
		if err := admit(res, 1); err != nil {
			t.Fatalf("%s: %v", res, err)
		}
	}
	stalled.Stop()
	t.Cleanup(stalled.Cont)
	until := time.Now().Add(1500 * time.Millisecond)
	var okHealthy, failedHealthy, okStalled atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for _, res := range onStalled {
		wg.Go(func() {
			for token := uint64(2); time.Now().Before(until); token++ {
				if admit(res, token) == nil {
					okStalled.Add(1)
				}
			}
		})
	}
	for _, res := range healthy {
		wg.Go(func() {
			for token := uint64(2); time.Now().Before(until); token++ {
				if err := admit(res, token); err != nil {
					failedHealthy.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("%s token %d: %v", res, token, err))
				} else {
					okHealthy.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if okStalled.Load() != 0 {
		t.Errorf("%d admissions on the stopped master answered", okStalled.Load())
	}
	if failedHealthy.Load() != 0 || okHealthy.Load() == 0 {
		t.Errorf("other masters: %d admissions failed (first: %v), %d admitted; want none failed",
			failedHealthy.Load(), firstErr.Load(), okHealthy.Load())
	}
	// Once the master answers again, no entry is left behind: it runs what
	// its socket held (the admissions and abandons sent while it was
	// stopped), and the releases still owed reach it. (Which part owns a
	// release a lane merged is TestLaneMerge's.)
	stalled.Cont()
	redistest.Poll(t, 20*time.Second, "every in-flight entry released", func() error {
		for _, n := range cluster.Nodes {
			reply, err := redistest.Do(n.Addr(), nil, "SCAN", "0", "MATCH", "*"+prefix+"*", "TYPE", "zset", "COUNT", "100000")
			if err != nil {
				return err
			}
			if keys, _ := reply.([]any)[1].([]any); len(keys) != 0 {
				return fmt.Errorf("%s holds in-flight keys %v", n.Addr(), keys)
			}
		}
		return nil
	})
}

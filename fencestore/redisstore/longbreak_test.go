package redisstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// breakLonger is longer than the window of releases a resend takes
// (recentFor, 10 s): a failover in production takes that long to be
// decided (Sentinel's down-after-milliseconds, cluster-node-timeout).
const breakLonger = 12 * time.Second

// A release acknowledged just before the store broke, which the server
// that answers after the break lacks (as a replica promoted without it
// would), is sent again when the subscription comes back, though the
// break lasted longer than the window a resend looks back over: the
// window ends where the break began, not where the resend is. Before, it
// ended at the resend, and after a break of more than five seconds the
// entry held its resource's newer requests for its whole bound.
func TestLongBreakResendsFromItsStart(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	s, prefix := newStore(t, srv, redisstore.Options{})
	ctx := t.Context()
	e := releasedEntry(t, s, "r", srv.Addr(), prefix)
	// Another request in flight at the crash: its release, made during
	// the break, is owed across it, retried and failing until the server
	// is back (none of that moves where the break began).
	d, err := s.Admit(ctx, fencestore.Admission{Resource: "r2", Token: 1, Compare: fencestore.Greater, Flight: time.Minute})
	if err != nil || !d.Admitted {
		t.Fatalf("Admit(r2) = %+v, %v", d, err)
	}
	// The server loses the release, as a promoted replica that missed it
	// (written before the crash, so that the restarted server holds it).
	e.put(t, srv.Addr())

	srv.Kill()
	// The admin's look at the store (every few seconds) sees the break.
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	if err := s.Ping(pctx); err == nil {
		t.Fatal("Ping of a killed server: nil")
	}
	cancel()
	s.Release(d.Flight)
	time.Sleep(breakLonger)
	srv.Restart(t)
	// The entry's bound is a minute: gone well before, it was released
	// again once the subscription came back.
	e.waitGone(t, srv.Addr(), 10*time.Second, "the release sent again after a long break")
}

// On a Cluster, a replica that sends a failing master nothing (its only
// entry there was released just before the crash) still sends its recent
// releases again: the admin's look at the store reads every master and
// fails, and that failure sends them like a failed admission does. The
// promoted replica, which lacks the release, loses the entry within
// seconds of its promotion, not after the entry's bound.
func TestClusterIdleShardResends(t *testing.T) {
	cluster := redistest.StartClusterWithReplicas(t, 3, 1)
	s, cc, prefix := newClusterStore(t, cluster, redisstore.Options{}, nil)
	ctx := t.Context()
	id, err := s.Init(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	s.Expect(id)
	sub, err := cc.MasterForKey(ctx, prefix+"inflight") // the releases' channel
	if err != nil {
		t.Fatal(err)
	}
	// A resource on a master that does not hold the subscription: its
	// failover does not bring the subscription back.
	var res string
	var master *redistest.Server
	for i := 0; master == nil; i++ {
		res = "orders/" + strconv.Itoa(i)
		node, err := cc.MasterForKey(ctx, prefix+res)
		if err != nil {
			t.Fatal(err)
		}
		if addr := node.Options().Addr; addr != sub.Options().Addr {
			for _, n := range cluster.Nodes {
				if n.Addr() == addr {
					master = n
				}
			}
		}
	}
	replica := replicaOf(t, cluster, master.Addr())

	e := releasedEntry(t, s, res, master.Addr(), prefix)
	// The replica holds the entry, as one the master's crash cut off from
	// the release would: written back on the master and replicated (a
	// cluster replica takes no writes of its own).
	e.put(t, master.Addr())
	if n, err := redistest.Do(master.Addr(), nil, "WAIT", "1", "5000"); err != nil || n != int64(1) {
		t.Fatalf("WAIT 1 = %v, %v; want the replica's acknowledgement", n, err)
	}

	master.Kill()
	// The admin's look at the store, every half second here, and nothing
	// else sent to the store.
	stop := make(chan struct{})
	looked := make(chan struct{})
	go func() {
		defer close(looked)
		for {
			pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			_ = s.Ping(pctx)
			cancel()
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stop); <-looked }()
	redistest.WaitRole(t, replica, nil, "master", 15*time.Second)
	e.waitGone(t, replica, 15*time.Second, "the release sent again to the promoted replica")
}

// replicaOf returns the address of the replica of the master at addr.
func replicaOf(t testing.TB, cluster *redistest.Cluster, addr string) string {
	t.Helper()
	for _, n := range cluster.Nodes {
		info, err := redistest.Info(n.Addr(), nil, "replication")
		if err != nil {
			t.Fatal(err)
		}
		if info["role"] == "slave" && info["master_host"]+":"+info["master_port"] == addr {
			return n.Addr()
		}
	}
	t.Fatalf("no replica of %s", addr)
	return ""
}

package etcdstore

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore/etcdtest"
)

// A replica that closes sends the releases it still owes: here one held
// back by a release backoff (as after a failed attempt) when Close comes.
func TestCloseFlushesReleases(t *testing.T) {
	c := etcdtest.Start(t)
	cl := c.Client(t)
	s := New(c.Client(t), Options{KeyPrefix: "flush:"})
	ctx := ctxTest(t)
	d, err := s.Admit(ctx, fencestore.Admission{Resource: "r", Token: 1, Flight: time.Minute})
	if err != nil || !d.Flight.Registered() {
		t.Fatalf("Admit = %+v, %v", d, err)
	}
	s.batch.mu.Lock()
	s.batch.relsAfter = time.Now().Add(time.Hour)
	s.batch.mu.Unlock()
	s.Release(d.Flight)
	if resp, err := cl.Get(ctx, d.Flight.Key); err != nil || resp.Count != 1 {
		t.Fatalf("record before Close: %v, %v; want it still there (its release waits out the backoff)", resp, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if resp, err := cl.Get(ctx, "flush:\x00inflight/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Fatalf("in-flight records after Close: %v, %v; want none", resp, err)
	}
}

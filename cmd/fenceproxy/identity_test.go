package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
)

func newTestGuard(s *memstore.Store, auto bool) *identityGuard {
	return newIdentityGuard(s, s, auto, zap.NewNop(), prometheus.NewRegistry(), time.Hour)
}

func admitOne(g *identityGuard, token uint64) (fencestore.Decision, error) {
	return g.Admit(context.Background(), fencestore.Admission{Resource: "r", Token: token})
}

// waitLostRecord waits for the store to hold a lost record (the guard
// writes it in the background).
func waitLostRecord(t *testing.T, s fencestore.Keeper) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		id, err := s.Identity(context.Background())
		if err == nil && fencestore.IsLostRecord(id) {
			return id
		}
		if time.Now().After(deadline) {
			t.Fatalf("no lost record: Identity = %q, %v", id, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func wantLost(t *testing.T, g *identityGuard, what string) {
	t.Helper()
	if _, err := admitOne(g, 99); !errors.Is(err, fencestore.ErrStoreLost) {
		t.Fatalf("%s: admission = %v, want store lost", what, err)
	}
	if g.ready(context.Background()) == nil || testutil.ToFloat64(g.lost) != 1 {
		t.Fatalf("%s: ready or gauge not set", what)
	}
}

// The store loses everything: the guard refuses with store-lost from the
// admission that meets the loss on, fails readiness, sets the gauge and
// marks the store lost, so that a replica that starts cold refuses it too
// and a record another replica would write is not; an operator's force
// resumes every replica, the lost one by its watch, an idle one on its
// first request, a cold one by its watch; a second force resumes them all
// again.
func TestIdentityGuardLostAndForced(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	g := newTestGuard(s, true)
	if _, err := admitOne(g, 1); err == nil {
		t.Fatal("admitted before the identity was read")
	}
	g.start(ctx, time.Second)
	if d, err := admitOne(g, 10); err != nil || !d.Admitted {
		t.Fatalf("after start: %+v %v", d, err)
	}
	if id, _ := s.Identity(ctx); id == "" || fencestore.Forced(id) {
		t.Fatalf("auto wrote %q", id)
	}
	idle := newTestGuard(s, true) // started, then never asked until the force
	idle.start(ctx, time.Second)

	s.Clear() // FLUSHALL, or a restart without persistence
	if _, err := admitOne(g, 5); !errors.Is(err, fencestore.ErrStoreLost) {
		t.Fatalf("5 after the loss: %v, want store lost", err)
	}
	wantLost(t, g, "after the loss")
	waitLostRecord(t, s)
	// A replica that starts cold reads the lost record: refused.
	cold := newTestGuard(s, true)
	cold.start(ctx, time.Second)
	wantLost(t, cold, "cold start on a lost store")
	if _, err := s.Init(ctx, false); !errors.Is(err, fencestore.ErrIdentityExists) {
		t.Fatalf("a plain Init on a lost store = %v, want ErrIdentityExists", err)
	}

	// The operator raises the mark and forces a record.
	if _, _, _, err := s.Raise(ctx, "r", fencestore.Mark{Token: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Init(ctx, true); err != nil {
		t.Fatal(err)
	}
	g.step(ctx)
	cold.step(ctx)
	for name, x := range map[string]*identityGuard{"lost": g, "cold": cold, "idle": idle} {
		if d, err := admitOne(x, 5); err != nil || d.Admitted || d.Mark != 10 {
			t.Fatalf("%s replica: 5 after recovery: %+v %v, want refused by the raised mark 10", name, d, err)
		}
		if x.ready(ctx) != nil || testutil.ToFloat64(x.lost) != 0 {
			t.Fatalf("%s replica: forced record not taken up", name)
		}
	}
	// A second force: every replica resumes again, on its next request.
	if _, err := s.Init(ctx, true); err != nil {
		t.Fatalf("second force: %v", err)
	}
	for name, x := range map[string]*identityGuard{"lost": g, "cold": cold, "idle": idle} {
		if d, err := admitOne(x, 11); err != nil || !d.Admitted {
			t.Fatalf("%s replica after the second force: %+v %v", name, d, err)
		}
	}
}

// An idle replica notices a loss from its watch alone, without a request,
// and a store that went back in time is lost like one that was emptied.
func TestIdentityGuardIdleAndRollback(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	g := newTestGuard(s, true)
	g.start(ctx, time.Second)
	d, err := admitOne(g, 10)
	if err != nil || !d.Admitted || d.Generation == 0 {
		t.Fatalf("10: %+v %v", d, err)
	}
	g.step(ctx)
	if testutil.ToFloat64(g.lost) != 0 {
		t.Fatal("lost before anything happened")
	}
	s.Restore(d.Generation - 1) // a backup from before token 10
	g.step(ctx)
	wantLost(t, g, "idle replica after a rollback")
	waitLostRecord(t, s)
}

// Without a record: manual refuses until an operator writes one; a store
// with marks but no record refuses even with auto.
func TestIdentityGuardWithoutRecord(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	g := newTestGuard(s, false)
	g.start(ctx, time.Second)
	if _, err := admitOne(g, 1); err == nil || !strings.Contains(err.Error(), "FENCE_STORE_INIT=manual") {
		t.Fatalf("manual, no record: %v", err)
	}
	if _, err := s.Init(ctx, false); err != nil {
		t.Fatal(err)
	}
	g.step(ctx)
	if d, err := admitOne(g, 1); err != nil || !d.Admitted {
		t.Fatalf("after store init: %+v %v", d, err)
	}

	old := memstore.New()
	if _, err := old.Admit(ctx, fencestore.Admission{Resource: "x", Token: 3}); err != nil {
		t.Fatal(err)
	}
	g = newTestGuard(old, true)
	g.start(ctx, time.Second)
	var unsafe *fencestore.UnsafeError
	if _, err := admitOne(g, 4); !errors.As(err, &unsafe) || !strings.Contains(unsafe.Reason, "marks but no identity record") {
		t.Fatalf("marks without a record: %v", err)
	}
}

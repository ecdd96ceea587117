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

// The store loses everything: the guard refuses with store-lost from the
// admission that meets the loss on, fails readiness and sets the gauge,
// until an operator forces a new record; a record written by another replica
// on the emptied store is not taken up.
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

	s.Clear() // FLUSHALL, or a restart without persistence
	_, err := admitOne(g, 5)
	if !errors.Is(err, fencestore.ErrStoreLost) {
		t.Fatalf("5 after the loss: %v, want store lost", err)
	}
	if g.ready(ctx) == nil || testutil.ToFloat64(g.lost) != 1 {
		t.Fatal("lost store: ready or gauge not set")
	}
	if _, err := admitOne(g, 11); !errors.Is(err, fencestore.ErrStoreLost) {
		t.Fatalf("11 after the loss: %v", err)
	}
	// A fresh replica writes a plain record on the emptied store: not the
	// operator's word.
	if _, err := s.Init(ctx, false); err != nil {
		t.Fatal(err)
	}
	g.step(ctx)
	if _, err := admitOne(g, 12); !errors.Is(err, fencestore.ErrStoreLost) {
		t.Fatalf("after another replica's plain record: %v, want still lost", err)
	}
	// The operator raises the mark and forces a record: taken up.
	if _, _, _, err := s.Raise(ctx, "r", fencestore.Mark{Token: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Init(ctx, true); err != nil {
		t.Fatal(err)
	}
	g.step(ctx)
	if g.ready(ctx) != nil || testutil.ToFloat64(g.lost) != 0 {
		t.Fatal("forced record not taken up")
	}
	if d, err := admitOne(g, 5); err != nil || d.Admitted || d.Mark != 10 {
		t.Fatalf("5 after recovery: %+v %v, want refused by the raised mark 10", d, err)
	}
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

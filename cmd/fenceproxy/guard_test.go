package main

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore"
)

// While a refusal is in force, Admit returns it (an ErrUnavailable naming
// the setting) without touching the store and without allocating; cleared,
// Admit passes through at the store's own cost.
func TestGuardedStore(t *testing.T) {
	ctx := context.Background()
	inner := memstore.New()
	g := &guardedStore{Store: inner}
	unsafe := &fencestore.UnsafeError{Reason: "Redis maxmemory-policy is allkeys-lru, which can evict marks"}
	g.unsafe.Store(unsafe)

	_, err := g.Admit(ctx, fencestore.Admission{Resource: "r", Token: 7, Compare: fencestore.AtLeast})
	var ue *fencestore.UnsafeError
	if !errors.Is(err, fencestore.ErrUnavailable) || !errors.As(err, &ue) || ue != unsafe {
		t.Fatalf("Admit while unsafe = %v", err)
	}
	if err := g.ready(ctx); err != unsafe {
		t.Fatalf("ready while unsafe = %v", err)
	}
	if _, ok, _ := inner.Mark(ctx, "r"); ok {
		t.Fatal("a refused admission reached the store")
	}
	if n := testing.AllocsPerRun(100, func() {
		_, _ = g.Admit(ctx, fencestore.Admission{Resource: "r", Token: 7, Compare: fencestore.AtLeast})
	}); n != 0 {
		t.Fatalf("a refusal allocates %v times", n)
	}

	g.unsafe.Store(nil)
	if d, err := g.Admit(ctx, fencestore.Admission{Resource: "r", Token: 7, Compare: fencestore.AtLeast}); err != nil || !d.Admitted {
		t.Fatalf("Admit when safe = %+v, %v", d, err)
	}
	if err := g.ready(ctx); err != nil {
		t.Fatalf("ready when safe = %v", err)
	}
	through := testing.AllocsPerRun(100, func() {
		_, _ = g.Admit(ctx, fencestore.Admission{Resource: "r", Token: 7, Compare: fencestore.AtLeast})
	})
	direct := testing.AllocsPerRun(100, func() {
		_, _ = inner.Admit(ctx, fencestore.Admission{Resource: "r", Token: 7, Compare: fencestore.AtLeast})
	})
	if through != direct {
		t.Fatalf("the guard adds allocations: %v through it, %v without", through, direct)
	}
}

// fakeRead is a settings reader whose answer the test sets.
type fakeRead struct {
	nodes []redisstore.Settings
	err   error
	calls atomic.Int64
}

func (f *fakeRead) read(context.Context) ([]redisstore.Settings, error) {
	f.calls.Add(1)
	return f.nodes, f.err
}

// The watch's verdicts: refused until first checked; a Redis that does not
// answer leaves the verdict as it was; an unsafe setting refuses (refuse)
// or warns (warn), each change logged once; a refusal of CONFIG GET refuses
// under refuse and advises warn.
func TestSettingsWatchVerdicts(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	f := &fakeRead{}
	policy := settingsPolicy{eviction: config.EvictionRefuse, persistence: config.PersistenceWarn}
	w := newSettingsWatch(f.read, policy, memstore.New(), zap.New(core), time.Hour, time.Second)
	ctx := context.Background()
	reason := func() string {
		if u := w.guard.unsafe.Load(); u != nil {
			return u.Reason
		}
		return ""
	}

	if r := reason(); !strings.Contains(r, "not checked yet") || !strings.Contains(r, "FENCE_REDIS_EVICTION=refuse") {
		t.Fatalf("before any check: %q", r)
	}
	f.err = fencestore.Unavailable(errors.New("connection refused"))
	w.check(ctx)
	if r := reason(); !strings.Contains(r, "not checked yet") || w.checked {
		t.Fatalf("after an unanswered check: %q, checked %t", r, w.checked)
	}

	f.err = nil
	f.nodes = []redisstore.Settings{{MaxmemoryPolicy: "allkeys-lru", AppendOnly: "yes", AppendFsync: "always"}}
	w.check(ctx)
	w.check(ctx)
	if r := reason(); r != "Redis maxmemory-policy is allkeys-lru, which can evict marks (FENCE_REDIS_EVICTION=refuse)" {
		t.Fatalf("allkeys-lru: %q", r)
	}
	if n := logs.FilterLevelExact(zap.ErrorLevel).Len(); n != 1 {
		t.Fatalf("%d error lines for one refusal checked twice, want 1", n)
	}

	f.err = fencestore.Unavailable(errors.New("connection refused"))
	w.check(ctx)
	if r := reason(); !strings.Contains(r, "allkeys-lru") {
		t.Fatalf("an unanswered check changed the verdict: %q", r)
	}

	f.err = nil
	f.nodes = []redisstore.Settings{{MaxmemoryPolicy: "noeviction", AppendOnly: "no", AppendFsync: "everysec"}}
	w.check(ctx)
	w.check(ctx)
	if r := reason(); r != "" {
		t.Fatalf("noeviction: still refused: %q", r)
	}
	warns := logs.FilterLevelExact(zap.WarnLevel).All()
	if len(warns) != 1 || !strings.HasPrefix(warns[0].Message, "FENCE_REDIS_PERSISTENCE=warn: Redis appendonly is no") {
		t.Fatalf("warnings: %+v", warns)
	}

	f.err = errors.New("ERR unknown command 'config'")
	w.check(ctx)
	if r := reason(); !strings.Contains(r, "refuses CONFIG GET") || !strings.Contains(r, "FENCE_REDIS_EVICTION=warn") ||
		strings.Contains(r, "unknown command") {
		t.Fatalf("CONFIG refused: %q (the server's words belong in the log, not in a client's answer)", r)
	}

	f.err = nil
	f.nodes = []redisstore.Settings{{MaxmemoryPolicy: "noeviction", AppendOnly: "yes", AppendFsync: "always"}}
	w.check(ctx)
	if r := reason(); r != "" {
		t.Fatalf("safe: %q", r)
	}
	if logs.FilterMessage("redis settings: every check passes again").Len() != 1 {
		t.Fatal("the end of the refusal is not logged")
	}
}

// Cluster settings: a risk on some masters is counted, the nodes at fault
// go to the log, never into the reason.
func TestSettingsJudgeCluster(t *testing.T) {
	nodes := []redisstore.Settings{
		{Node: "10.0.0.1:6379", MaxmemoryPolicy: "noeviction", AppendOnly: "yes", AppendFsync: "always"},
		{Node: "10.0.0.2:6379", MaxmemoryPolicy: "allkeys-lru", AppendOnly: "yes", AppendFsync: "everysec"},
		{Node: "10.0.0.3:6379", MaxmemoryPolicy: "noeviction", AppendOnly: "yes", AppendFsync: "everysec"},
	}
	fs := settingsPolicy{eviction: config.EvictionRefuse, persistence: config.PersistenceRefuse}.judge(nodes, nil)
	if len(fs) != 2 {
		t.Fatalf("%d findings", len(fs))
	}
	if f := fs[0]; f.ok || f.text != "Redis maxmemory-policy is allkeys-lru, which can evict marks, on 1 of 3 masters" ||
		len(f.nodes) != 1 || f.nodes[0] != "10.0.0.2:6379" {
		t.Errorf("eviction: %+v", f)
	}
	if f := fs[1]; f.ok || !strings.Contains(f.text, "appendfsync is everysec") || !strings.HasSuffix(f.text, "on 2 of 3 masters") ||
		len(f.nodes) != 2 || strings.Contains(f.text, "10.0.0") {
		t.Errorf("persistence: %+v", f)
	}
}

// poke makes the running watch check at once, not at its period.
func TestSettingsWatchPoke(t *testing.T) {
	f := &fakeRead{nodes: []redisstore.Settings{{MaxmemoryPolicy: "noeviction", AppendOnly: "yes", AppendFsync: "always"}}}
	w := newSettingsWatch(f.read, settingsPolicy{eviction: config.EvictionRefuse, persistence: config.PersistenceOff},
		memstore.New(), zap.NewNop(), time.Hour, time.Second)
	w.check(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.run(ctx) }()
	defer func() { cancel(); <-done }()
	w.poke()
	waitFor(t, "the poked check", func() bool { return f.calls.Load() == 2 })
}

package main

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// identityGuard is the store behind the identity and generation checks.
// At start it reads the store's identity record (FENCE_STORE_INIT=auto
// writes one on a store with no marks and none), and from then on every
// admission checks, in the store's own atomic step, that the record is
// still the one it read and that the store's generation has not gone below
// the greatest this process saw (fencestore.Keeper.Expect,
// fencestore/generation.go). An admission that finds either returns a
// *fencestore.LostError: this guard then refuses every admission with it
// (503 store-lost), fails its store check (the store's state is lost), logs an error, sets
// fenceproxy_store_lost to 1, and marks the store itself as lost
// (Keeper.MarkLost), so that every other replica, one that starts cold
// included, refuses it from its next admission. The watch finds the same
// on an idle replica (Ping reads the record and the generation).
//
// Only an operator ends it, with `fenceproxy store init --force`: a forced
// record that supersedes the one this process expected
// (fencestore.Supersedes) is taken up, whether the watch finds it or an
// admission meets it first, lost or not; an older forced record (a backup
// restored from before the last recovery) is not.
//
// Until the record has been read (the store does not answer yet, or has no
// record and FENCE_STORE_INIT=manual, or has marks but no record, or holds
// a lost record), every admission is refused too: fail closed.
type identityGuard struct {
	fencestore.Store
	keeper fencestore.Keeper
	auto   bool
	log    *zap.Logger
	lost   prometheus.Gauge
	every  time.Duration
	// refusal is the error every admission gets while set; nil once the
	// identity is known and intact. One atomic load per admission.
	refusal atomic.Pointer[refusal]
	// want is the identity record expected ("" before one was read).
	want atomic.Pointer[string]
	// marking is 1 while a MarkLost runs; marked once one has succeeded
	// since the loss was found.
	marking, marked atomic.Bool
}

type refusal struct{ err error }

var errIdentityNotRead = &fencestore.UnsafeError{Reason: "the store's identity record has not been read yet"}

func newIdentityGuard(s fencestore.Store, k fencestore.Keeper, auto bool, log *zap.Logger, reg prometheus.Registerer, every time.Duration) *identityGuard {
	g := &identityGuard{Store: s, keeper: k, auto: auto, log: log, every: every,
		lost: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fenceproxy_store_lost",
			Help: "1 while the store is lost: its identity record is gone, changed or marked lost, or its generation went back, since this process read it (every fenced request gets 503 store-lost), else 0.",
		})}
	reg.MustRegister(g.lost)
	g.refusal.Store(&refusal{errIdentityNotRead})
	empty := ""
	g.want.Store(&empty)
	return g
}

// Admit refuses while a refusal is in force, notices a lost store, and
// takes up an operator's forced record that an admission meets.
func (g *identityGuard) Admit(ctx context.Context, a fencestore.Admission) (fencestore.Decision, error) {
	if r := g.refusal.Load(); r != nil {
		return fencestore.Decision{}, r.err
	}
	d, err := g.Store.Admit(ctx, a)
	var lost *fencestore.LostError
	if !errors.As(err, &lost) {
		return d, err
	}
	if !lost.Rollback && g.takenUp(lost.Found) {
		return g.Store.Admit(ctx, a)
	}
	g.fail(lost)
	return d, err
}

// takenUp reports whether id is the record expected now: taken up here
// (takeUp), or a moment ago by the watch or another admission that met the
// same forced record first (then this admission was sent expecting the
// record before it, and is simply tried again).
func (g *identityGuard) takenUp(id string) bool {
	return g.takeUp(id) || (id != "" && id == *g.want.Load())
}

// fail refuses every admission with lost from now on, once, and marks the
// store lost before it returns: the request that met the loss is answered
// only once the lost record is written (or writing it failed, and the watch
// retries), so that a replica starting cold after that answer finds the
// record, rather than a store it cannot tell from a sound one.
func (g *identityGuard) fail(lost *fencestore.LostError) {
	old := g.refusal.Load()
	if old != nil {
		var was *fencestore.LostError
		if errors.As(old.err, &was) {
			return // lost already
		}
	}
	if !g.refusal.CompareAndSwap(old, &refusal{lost}) {
		return
	}
	g.lost.Set(1)
	g.marked.Store(false)
	g.log.Error("the store is lost: every fenced request is refused (503 store-lost) until an operator "+
		"raises the marks to the lease service's current tokens and runs fenceproxy store init --force",
		zap.Error(lost), zap.String("want", lost.Want), zap.String("found", lost.Found), zap.Bool("rollback", lost.Rollback))
	g.markLost(context.Background())
}

// markLost writes the lost record (Keeper.MarkLost), unless one is being
// written or was since the loss; the watch retries it when it fails.
func (g *identityGuard) markLost(ctx context.Context) {
	if g.marked.Load() || !g.marking.CompareAndSwap(false, true) {
		return
	}
	defer g.marking.Store(false)
	ctx, cancel := context.WithTimeout(ctx, max(g.every, 2*time.Second))
	defer cancel()
	// Tried again within the bound: the loss is often met in a failover,
	// while the client still dials the old master for a moment.
	var held string
	var err error
	for {
		if held, err = g.keeper.MarkLost(ctx, *g.want.Load()); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			g.log.Warn("could not mark the store lost; the watch retries", zap.Error(err))
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	g.marked.Store(true)
	if fencestore.IsLostRecord(held) {
		g.log.Warn("marked the store lost: every replica refuses it from its next admission", zap.String("record", held))
	}
}

// takeUp expects id, and admits again, when it is a forced record that
// supersedes the one expected: the operator's recovery.
func (g *identityGuard) takeUp(id string) bool {
	want := *g.want.Load()
	if !fencestore.Supersedes(id, want) {
		return false
	}
	g.keeper.Expect(id)
	g.want.Store(&id)
	g.refusal.Store(nil)
	g.lost.Set(0)
	g.log.Warn("took up the store identity record an operator forced; admitting again", zap.String("identity", id), zap.String("previous", want))
	return true
}

// ready fails while a refusal is in force.
func (g *identityGuard) ready(context.Context) error {
	if r := g.refusal.Load(); r != nil {
		return r.err
	}
	return nil
}

// establish reads (or, with auto, writes) the identity record and expects
// it. It returns the refusal to keep when it cannot: a *LostError for a
// store marked lost.
func (g *identityGuard) establish(ctx context.Context) error {
	if n, ok := g.keeper.(interface{ Nesting(context.Context) error }); ok {
		if err := n.Nesting(ctx); err != nil {
			if errors.Is(err, fencestore.ErrUnavailable) {
				return err
			}
			return &fencestore.UnsafeError{Reason: "FENCE_KEY_PREFIX: " + err.Error()}
		}
	}
	id, err := g.keeper.Identity(ctx)
	if err != nil {
		return err
	}
	if fencestore.IsLostRecord(id) {
		return &fencestore.LostError{Want: *g.want.Load(), Found: id}
	}
	if id == "" {
		has, err := g.keeper.HasMarks(ctx)
		switch {
		case err != nil:
			return err
		case has:
			return &fencestore.UnsafeError{Reason: "the store has marks but no identity record (kept by an older fenceproxy, or it lost the record): " +
				"check the marks, then run fenceproxy store init"}
		case !g.auto:
			return &fencestore.UnsafeError{Reason: "the store has no identity record and FENCE_STORE_INIT=manual: run fenceproxy store init"}
		}
		id, err = g.keeper.Init(ctx, false)
		if errors.Is(err, fencestore.ErrIdentityExists) {
			// Another replica wrote it first: take up its record.
			id, err = g.keeper.Identity(ctx)
		}
		if err != nil {
			return err
		}
		if fencestore.IsLostRecord(id) {
			return &fencestore.LostError{Found: id}
		}
		g.log.Info("store identity record written (FENCE_STORE_INIT=auto)", zap.String("identity", id))
	}
	g.keeper.Expect(id)
	g.want.Store(&id)
	return nil
}

// start makes one attempt to establish the identity before the proxy
// listens, so that a store that answers admits from the first request; the
// watch keeps trying when it fails.
func (g *identityGuard) start(ctx context.Context, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	g.settle(g.establish(ctx))
}

// settle applies establish's outcome.
func (g *identityGuard) settle(err error) {
	var lost *fencestore.LostError
	switch {
	case err == nil:
		g.refusal.Store(nil)
		g.lost.Set(0)
	case errors.As(err, &lost):
		g.refusal.Store(&refusal{lost})
		g.lost.Set(1)
		g.marked.Store(true) // the store says so itself
		g.log.Error("the store is marked lost: every fenced request is refused (503 store-lost) until an operator "+
			"raises the marks to the lease service's current tokens and runs fenceproxy store init --force", zap.String("found", lost.Found))
	default:
		g.refusal.Store(&refusal{keepUnsafe(err)})
		g.log.Warn("store identity not established; fenced requests are refused", zap.Error(err))
	}
}

// watch establishes the identity, then looks every period: while the store
// is intact, for a loss an idle replica would not meet otherwise (Ping
// reads the record and the generation); while it is lost, for an
// operator's forced record (and marks the store lost, when that failed
// before); it returns when ctx ends.
func (g *identityGuard) watch(ctx context.Context) {
	t := time.NewTicker(g.every)
	defer t.Stop()
	for {
		g.step(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// step is one look of watch.
func (g *identityGuard) step(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, max(g.every, 2*time.Second))
	defer cancel()
	r := g.refusal.Load()
	var lost *fencestore.LostError
	switch {
	case r == nil:
		err := g.Store.Ping(ctx)
		if errors.As(err, &lost) && (lost.Rollback || !g.takenUp(lost.Found)) {
			g.fail(lost)
		}
	case errors.As(r.err, &lost):
		id, err := g.keeper.Identity(ctx)
		if err == nil && g.takeUp(id) {
			return
		}
		g.markLost(ctx)
	default:
		err := g.establish(ctx)
		if err == nil || errors.As(err, &lost) || (r.err.Error() != keepUnsafe(err).Error() && !errors.Is(err, context.Canceled)) {
			g.settle(err)
		}
	}
}

// keepUnsafe makes err a refusal the proxy answers with 503: a store error
// already wraps fencestore.ErrUnavailable; anything else is wrapped.
func keepUnsafe(err error) error {
	if errors.Is(err, fencestore.ErrUnavailable) {
		return err
	}
	return fencestore.Unavailable(err)
}

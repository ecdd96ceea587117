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

// identityGuard is the store behind the identity check. At start it reads
// the store's identity record (FENCE_STORE_INIT=auto writes one on a store
// with no marks and none), and from then on every admission checks, in the
// store's own atomic step, that the record is still the one it read
// (fencestore.Keeper.Expect). An admission that finds it gone or changed
// returns a *fencestore.LostError: this guard then refuses every admission
// with it (503 store-lost), fails its store check (the store's state is
// lost), logs an error and sets
// fenceproxy_store_lost to 1, until an operator's `fenceproxy store init
// --force` writes a forced record, which it then takes up.
//
// Until the record has been read (the store does not answer yet, or has no
// record and FENCE_STORE_INIT=manual, or has marks but no record), every
// admission is refused too: fail closed.
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
}

type refusal struct{ err error }

var errIdentityNotRead = &fencestore.UnsafeError{Reason: "the store's identity record has not been read yet"}

func newIdentityGuard(s fencestore.Store, k fencestore.Keeper, auto bool, log *zap.Logger, reg prometheus.Registerer, every time.Duration) *identityGuard {
	g := &identityGuard{Store: s, keeper: k, auto: auto, log: log, every: every,
		lost: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fenceproxy_store_lost",
			Help: "1 while the store's identity record is gone or changed since this process read it (every fenced request gets 503 store-lost), else 0.",
		})}
	reg.MustRegister(g.lost)
	g.refusal.Store(&refusal{errIdentityNotRead})
	return g
}

// Admit refuses while a refusal is in force, and notices a lost store.
func (g *identityGuard) Admit(ctx context.Context, a fencestore.Admission) (fencestore.Decision, error) {
	if r := g.refusal.Load(); r != nil {
		return fencestore.Decision{}, r.err
	}
	d, err := g.Store.Admit(ctx, a)
	var lost *fencestore.LostError
	if errors.As(err, &lost) && g.refusal.CompareAndSwap(nil, &refusal{lost}) {
		g.lost.Set(1)
		g.log.Error("the store lost its identity record: every fenced request is refused (503 store-lost) until an operator "+
			"raises the marks to the lease service's current tokens and runs fenceproxy store init --force",
			zap.String("want", lost.Want), zap.String("found", lost.Found))
	}
	return d, err
}

// ready fails while a refusal is in force.
func (g *identityGuard) ready(context.Context) error {
	if r := g.refusal.Load(); r != nil {
		return r.err
	}
	return nil
}

// establish reads (or, with auto, writes) the identity record and expects
// it. It returns the refusal to keep when it cannot.
func (g *identityGuard) establish(ctx context.Context) error {
	id, err := g.keeper.Identity(ctx)
	if err != nil {
		return err
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
		g.log.Info("store identity record written (FENCE_STORE_INIT=auto)", zap.String("identity", id))
	}
	g.keeper.Expect(id)
	return nil
}

// start makes one attempt to establish the identity before the proxy
// listens, so that a store that answers admits from the first request; the
// watch keeps trying when it fails.
func (g *identityGuard) start(ctx context.Context, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := g.establish(ctx); err == nil {
		g.refusal.Store(nil)
	} else {
		g.refusal.Store(&refusal{keepUnsafe(err)})
		g.log.Warn("store identity not established; fenced requests are refused", zap.Error(err))
	}
}

// watch establishes the identity, then, while the store is lost, looks for
// an operator's forced record every period; it returns when ctx ends.
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
	r := g.refusal.Load()
	var lost *fencestore.LostError
	switch {
	case r == nil:
	case errors.As(r.err, &lost):
		g.takeUpForced(ctx, lost)
	default:
		err := g.establish(ctx)
		if err == nil {
			g.refusal.Store(nil)
		} else if r.err.Error() != keepUnsafe(err).Error() && !errors.Is(err, context.Canceled) {
			g.refusal.Store(&refusal{keepUnsafe(err)})
			g.log.Warn("store identity not established; fenced requests are refused", zap.Error(err))
		}
	}
}

// takeUpForced expects a record that an operator forced after this process
// found its store lost: one that is neither the record it wanted nor the
// one it found then.
func (g *identityGuard) takeUpForced(ctx context.Context, lost *fencestore.LostError) {
	id, err := g.keeper.Identity(ctx)
	if err != nil || !fencestore.Forced(id) || id == lost.Want || id == lost.Found {
		return
	}
	g.keeper.Expect(id)
	g.refusal.Store(nil)
	g.lost.Set(0)
	g.log.Warn("took up the store identity record an operator forced; admitting again", zap.String("identity", id))
}

// keepUnsafe makes err a refusal the proxy answers with 503: a store error
// already wraps fencestore.ErrUnavailable; anything else is wrapped.
func keepUnsafe(err error) error {
	if errors.Is(err, fencestore.ErrUnavailable) {
		return err
	}
	return fencestore.Unavailable(err)
}

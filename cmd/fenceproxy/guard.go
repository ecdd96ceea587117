package main

import (
	"context"
	"sync/atomic"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

var _ fencestore.Store = (*guardedStore)(nil)

// guardedStore is the Redis store behind the settings check (settingsWatch):
// while the check finds a setting that can lose marks and its variable says
// refuse, every admission is refused with a *fencestore.UnsafeError (the
// proxy answers 503 naming the setting and forwards nothing) and the
// store's state is unsafe (/readyz fails too with
// FENCE_READY_REQUIRES_STORE=true). The refusal is per request because
// readiness is not enough even where it follows the store: a request that
// reaches the pod anyway (a port-forward, a sidecar peer) would be admitted
// against a store that can forget its mark.
type guardedStore struct {
	fencestore.Store // Mark, Drain, Release, Ping and Close pass through
	// unsafe is the refusal in force, nil while the settings are safe. Admit
	// reads it with one atomic load and returns it as is: no allocation on
	// the request path.
	unsafe atomic.Pointer[fencestore.UnsafeError]
}

// Admit refuses while a refusal is in force, else admits through the store.
func (g *guardedStore) Admit(ctx context.Context, a fencestore.Admission) (fencestore.Decision, error) {
	if u := g.unsafe.Load(); u != nil {
		return fencestore.Decision{}, u
	}
	return g.Store.Admit(ctx, a)
}

// ready is the readiness check that goes with the refusal.
func (g *guardedStore) ready(context.Context) error {
	if u := g.unsafe.Load(); u != nil {
		return u
	}
	return nil
}

package proxy

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// StoreState is what a look at the store found. Unsafe and lost admit
// nothing: each fenced request gets 503 and nothing fenced is forwarded.
// Down refuses what the store cannot answer (everything on one server; a
// silent master's slots on a Redis Cluster, see effect). Unfenced requests
// (reads) flow as always.
type StoreState string

const (
	// StoreOK: the store answers and no check refuses it.
	StoreOK StoreState = "ok"
	// StoreDown: the store does not answer within the admin's timeout.
	StoreDown StoreState = "down"
	// StoreUnsafe: the store answers, but a check refuses it (settings that
	// can lose marks, an identity record not read yet).
	StoreUnsafe StoreState = "unsafe"
	// StoreLost: the store's identity record is gone or changed
	// (fencestore.ErrStoreLost); an operator must act.
	StoreLost StoreState = "lost"
)

// storeStates are the values of fenceproxy_store_state's state label.
var storeStates = [...]StoreState{StoreOK, StoreDown, StoreUnsafe, StoreLost}

// defaultStoreEvery is how often the admin looks at the store when nothing
// asks: what fenceproxy_store_up and fenceproxy_store_state lag by.
const defaultStoreEvery = 5 * time.Second

// storeHealth looks at the store (a ping and every check, each bounded by
// the admin's timeout), keeps the verdict for /readyz and the metrics, and
// logs each change of state once.
type storeHealth struct {
	o AdminOptions

	mu   sync.Mutex
	last storeStatus // the last look; State "" before the first
}

// look pings the store and runs every check, all of them (the status page
// shows every reason), and records the verdict.
func (h *storeHealth) look(ctx context.Context) storeStatus {
	st := storeStatus{Kind: h.o.StoreKind, Checks: []checkResult{}}
	if st.Kind == "" {
		st.Kind = "unknown"
	}
	probe := func(f func(context.Context) error) error {
		ctx, cancel := context.WithTimeout(ctx, h.o.Timeout)
		defer cancel()
		return f(ctx)
	}
	if err := probe(h.o.Store.Ping); err != nil {
		st.Error = "fence store: " + err.Error()
	} else {
		st.Answering = true
	}
	var refused bool
	for _, check := range h.o.Checks {
		err := probe(check)
		if err == nil {
			st.Checks = append(st.Checks, checkResult{OK: true})
			continue
		}
		st.Checks = append(st.Checks, checkResult{Error: err.Error()})
		refused = true
		if errors.Is(err, fencestore.ErrStoreLost) {
			st.Lost = true
		}
	}
	// A lost store needs an operator whether or not it answers now; a store
	// that does not answer cannot have its settings read, so down comes
	// before unsafe.
	switch {
	case st.Lost:
		st.State = StoreLost
	case !st.Answering:
		st.State = StoreDown
	case refused:
		st.State = StoreUnsafe
	default:
		st.State = StoreOK
	}
	h.record(st)
	return st
}

// record keeps st as the last look, sets the gauges, and logs a change of
// state.
func (h *storeHealth) record(st storeStatus) {
	h.mu.Lock()
	prev := h.last.State
	h.last = st
	h.mu.Unlock()
	if m := h.o.Metrics; m != nil {
		up := 0.0
		if st.Answering {
			up = 1
		}
		m.storeUp.Set(up)
		for _, s := range storeStates {
			v := 0.0
			if s == st.State {
				v = 1
			}
			m.storeState.WithLabelValues(string(s)).Set(v)
		}
	}
	if prev == st.State {
		return
	}
	switch {
	case st.State == StoreOK && prev != "":
		h.o.Logger.Info("fence store ok again: fenced requests are admitted", zap.String("was", string(prev)))
	case st.State != StoreOK:
		h.o.Logger.Warn("fence store "+string(st.State)+": "+st.State.effect()+"; unfenced requests flow"+
			h.readiness(), zap.String("reason", st.reason()))
	}
}

// effect says what a state other than ok does to fenced requests, for the
// log and /readyz. Down is a look that got no answer: a fenced request gets
// 503 when the store cannot answer it, which on a Redis Cluster with one
// master down is that master's requests only.
func (s StoreState) effect() string {
	if s == StoreDown {
		return "a fenced request gets 503 when the store cannot answer it (on a Redis Cluster, " +
			"the requests of a master that does not answer)"
	}
	return "every fenced request gets 503 until it is ok"
}

// readiness says what the state does to /readyz, for the log.
func (h *storeHealth) readiness() string {
	if h.o.ReadyRequiresStore {
		return "; not ready (FENCE_READY_REQUIRES_STORE=true)"
	}
	return "; /readyz stays 200 (FENCE_READY_REQUIRES_STORE=false)"
}

// lastLook is the verdict of the last look (State "" before the first).
func (h *storeHealth) lastLook() storeStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}

// watch looks at the store every o.StoreEvery until ctx ends, so that the
// metrics and the log follow the store when nobody asks.
func (h *storeHealth) watch(ctx context.Context) {
	t := time.NewTicker(h.o.StoreEvery)
	defer t.Stop()
	for {
		h.look(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reason is the first reason st is not ok: the ping's error, else the first
// failing check's ("" when ok).
func (st storeStatus) reason() string {
	if st.Error != "" {
		return st.Error
	}
	for _, c := range st.Checks {
		if !c.OK {
			return c.Error
		}
	}
	return ""
}

// WatchStore looks at the store every few seconds (AdminOptions.StoreEvery)
// until ctx ends: it keeps fenceproxy_store_up and fenceproxy_store_state
// current and logs each change of the store's state. /readyz, the status
// page and /status.json look for themselves as well.
func (a *Admin) WatchStore(ctx context.Context) { a.health.watch(ctx) }

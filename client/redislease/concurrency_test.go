package redislease_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/client/redislease"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// Many owners compete for one lease: never two hold it at once, and the
// tokens, in the order the holdings happened, are 1, 2, 3, ...: distinct,
// increasing, and with no token minted by a refused attempt.
func TestConcurrentAcquirers(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := ctxT(t)
	p := prefix()
	const (
		owners   = 16
		holdings = 200 // in all
	)

	var (
		holder atomic.Int64 // 1 + index of the owner holding it; 0 = none
		mu     sync.Mutex
		tokens []uint64 // in holding order
		done   atomic.Bool
	)
	var wg sync.WaitGroup
	for i := range owners {
		l := newLease(rdb, "hot", redislease.Options{Prefix: p, TTL: time.Minute})
		wg.Go(func() {
			for !done.Load() {
				tok, err := l.Acquire(ctx)
				if errors.Is(err, redislease.ErrHeld) {
					time.Sleep(time.Millisecond)
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				if prev := holder.Swap(int64(i + 1)); prev != 0 {
					t.Errorf("owner %d acquired while owner %d held the lease", i, prev-1)
				}
				mu.Lock()
				tokens = append(tokens, tok)
				if len(tokens) >= holdings {
					done.Store(true)
				}
				mu.Unlock()
				// Give up the local claim before Redis lets the next owner in.
				holder.Store(0)
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()

	if len(tokens) < holdings {
		t.Fatalf("%d holdings, want %d", len(tokens), holdings)
	}
	for i, tok := range tokens {
		if tok != uint64(i+1) {
			t.Fatalf("holding %d got token %d, want %d (tokens %v)", i, tok, i+1, tokens)
		}
	}
}

package redislease_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/fenceproxy/fenceproxy/client/redislease"
)

// Every test closes its clients and stops its redis-server; a goroutine left
// behind is a client or a wait that outlived its test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var prefixes atomic.Int64

// prefix returns a key prefix no other test of this binary uses, so that
// tests sharing a server cannot see each other's leases.
func prefix() string { return fmt.Sprintf("test%d:", prefixes.Add(1)) }

// newLease returns a lease on rdb under opts, with a fresh prefix unless opts
// names one.
func newLease(rdb redis.UniversalClient, name string, opts redislease.Options) *redislease.Lease {
	if opts.Prefix == "" {
		opts.Prefix = prefix()
	}
	return redislease.New(rdb, name, opts)
}

// ctxT returns a context that ends with the test, bounded so that a hung
// Redis fails the test rather than the whole run.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

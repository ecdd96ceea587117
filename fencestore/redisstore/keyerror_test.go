package redisstore

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// An admission the script refuses for its key (a corrupt mark, a key of
// another type) made no in-flight entry, so it sends no release to abandon
// one: neither owed nor acknowledged lately, batched or not. (A release
// for nothing would be harmless in Redis, but it takes a place in the
// capped pending set, retried for as long as the entry could have lived.)
func TestKeyErrorAbandonsNothing(t *testing.T) {
	srv := redistest.Start(t)
	for _, maxBatch := range []int{0, -1} {
		for _, bad := range []struct {
			name string
			set  func(c *redis.Client, key string) error
		}{
			{"corrupt mark", func(c *redis.Client, key string) error { return c.Set(t.Context(), key, "42:07", 0).Err() }},
			{"a hash", func(c *redis.Client, key string) error { return c.HSet(t.Context(), key, "f", "1").Err() }},
		} {
			t.Run(bad.name, func(t *testing.T) {
				client := redis.NewClient(srv.Options())
				prefix := "fence:keyerr:" + bad.name + ":"
				s := New(client, Options{KeyPrefix: prefix, MaxBatch: maxBatch})
				t.Cleanup(func() { _ = s.Close() })
				if err := bad.set(client, prefix+"r"); err != nil {
					t.Fatal(err)
				}
				_, err := s.Admit(t.Context(), fencestore.Admission{Resource: "r", Token: 7, Flight: time.Second})
				if !errors.Is(err, fencestore.ErrUnavailable) {
					t.Fatalf("Admit = %v, want unavailable", err)
				}
				time.Sleep(50 * time.Millisecond) // a release would be sent and acknowledged by now
				s.pend.mu.Lock()
				owed, recent := len(s.pend.m), len(s.pend.recent)
				s.pend.mu.Unlock()
				if owed != 0 || recent != 0 {
					t.Fatalf("a refused key left %d releases owed and %d acknowledged lately, want none", owed, recent)
				}
			})
		}
	}
}

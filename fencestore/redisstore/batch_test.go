package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// Concurrent admissions that form one batch (one script run over all their
// keys), some with a sequence and some without, one of them on a key of
// another type or holding a corrupt mark: that one fails, wrapping
// ErrUnavailable, and is left as it was; the others are admitted and write
// their marks.
func TestBatchForeignKey(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := t.Context()
	for _, foreign := range []struct {
		name   string
		create func(key string) error
	}{
		{"hash", func(key string) error { return c.HSet(ctx, key, "f", "1").Err() }},
		{"list", func(key string) error { return c.RPush(ctx, key, "1").Err() }},
		{"set", func(key string) error { return c.SAdd(ctx, key, "1").Err() }},
		{"empty sequence", func(key string) error { return c.Set(ctx, key, "42:", 0).Err() }},
		{"sequence with a leading zero", func(key string) error { return c.Set(ctx, key, "42:07", 0).Err() }},
	} {
		t.Run(foreign.name, func(t *testing.T) {
			prefix := "fence:batch-" + strings.ReplaceAll(foreign.name, " ", "-") + ":"
			if err := foreign.create(prefix + "foreign"); err != nil {
				t.Fatal(err)
			}
			dump, err := c.Dump(ctx, prefix+"foreign").Result()
			if err != nil {
				t.Fatal(err)
			}
			// A batcher whose worker starts only once every admission is
			// queued, so that they all go out in one script run.
			client := redis.NewClient(srv.Options())
			b := &batcher{client: client, oneCall: true, queue: make(chan *admission, 16), maxBatch: 16,
				log: zap.NewNop(), stop: make(chan struct{}), stopped: make(chan struct{})}
			s := New(client, Options{KeyPrefix: prefix, MaxBatch: -1})
			s.batch, b.pend = b, s.pend
			defer s.Close()

			resources := []string{"a", "b", "foreign", "c", "d"}
			// Odd ones carry a sequence, past 2^53.
			admissionFor := func(i int) fencestore.Admission {
				a := fencestore.Admission{Resource: resources[i], Token: uint64(10 + i), Compare: fencestore.Greater}
				if i%2 == 1 {
					a.Sequence, a.HasSequence = 1<<53+uint64(i), true
				}
				return a
			}
			type result struct {
				d   fencestore.Decision
				err error
			}
			results := make([]result, len(resources))
			var wg sync.WaitGroup
			for i := range resources {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					defer cancel()
					results[i].d, results[i].err = s.Admit(ctx, admissionFor(i))
				})
			}
			redistest.Poll(t, 5*time.Second, "every admission queued", func() error {
				if n := len(b.queue); n != len(resources) {
					return fmt.Errorf("%d queued", n)
				}
				return nil
			})
			b.wg.Add(1)
			go b.run()
			wg.Wait()

			for i, res := range resources {
				r := results[i]
				if res == "foreign" {
					if !errors.Is(r.err, fencestore.ErrUnavailable) {
						t.Errorf("Admit(%s), a %s = %+v, %v; want an error wrapping ErrUnavailable", res, foreign.name, r.d, r.err)
					}
					continue
				}
				a := admissionFor(i)
				want := fencestore.Decision{Admitted: true, Mark: a.Token, Sequence: a.Sequence, HasSequence: a.HasSequence}
				if r.err != nil || r.d != want {
					t.Errorf("Admit(%+v) = %+v, %v; want %+v", a, r.d, r.err, want)
				}
				value := string(fencestore.Mark{Token: a.Token, Sequence: a.Sequence, HasSequence: a.HasSequence}.AppendValue(nil))
				if got, err := c.Get(ctx, prefix+res).Result(); err != nil || got != value {
					t.Errorf("GET %s = %q, %v; want %s", prefix+res, got, err, value)
				}
			}
			if got, err := c.Dump(ctx, prefix+"foreign").Result(); err != nil || got != dump {
				t.Errorf("%sforeign, a %s, changed (%v); want it untouched", prefix, foreign.name, err)
			}
		})
	}
}

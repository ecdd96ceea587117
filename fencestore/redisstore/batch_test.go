package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// Concurrent admissions that form one batch (one script run over all their
// keys), one of them on a key of another type: that one fails, wrapping
// ErrUnavailable; the others are admitted and write their marks.
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
	} {
		t.Run(foreign.name, func(t *testing.T) {
			prefix := "fence:batch-" + foreign.name + ":"
			if err := foreign.create(prefix + "foreign"); err != nil {
				t.Fatal(err)
			}
			// A batcher whose worker starts only once every admission is
			// queued, so that they all go out in one script run.
			client := redis.NewClient(srv.Options())
			b := &batcher{client: client, oneCall: true, queue: make(chan *admission, 16), maxBatch: 16,
				stop: make(chan struct{}), stopped: make(chan struct{})}
			s := New(client, Options{KeyPrefix: prefix, MaxBatch: -1})
			s.batch = b
			defer s.Close()

			resources := []string{"a", "b", "foreign", "c", "d"}
			type result struct {
				d   fencestore.Decision
				err error
			}
			results := make([]result, len(resources))
			var wg sync.WaitGroup
			for i, res := range resources {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					defer cancel()
					results[i].d, results[i].err = s.Admit(ctx, fencestore.Admission{Resource: res, Token: uint64(10 + i), Compare: fencestore.Greater})
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
				want := uint64(10 + i)
				if r.err != nil || !r.d.Admitted || r.d.Mark != want {
					t.Errorf("Admit(%s, %d) = %+v, %v; want admitted", res, want, r.d, r.err)
				}
				if got, err := c.Get(ctx, prefix+res).Result(); err != nil || got != fmt.Sprint(want) {
					t.Errorf("GET %s = %q, %v; want %d", prefix+res, got, err, want)
				}
			}
			if typ, err := c.Type(ctx, prefix+"foreign").Result(); err != nil || typ != foreign.name {
				t.Errorf("TYPE %sforeign = %q, %v; want %s, untouched", prefix, typ, err, foreign.name)
			}
		})
	}
}

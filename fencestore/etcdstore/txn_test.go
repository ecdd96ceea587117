package etcdstore

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore/etcdtest"
)

// The tree decides as Decide does, over every kind of stored mark and
// admission: tokens, sequences and floors drawn near one another so that
// equal and adjacent marks meet, both comparisons, with and without a
// flight. Each case has its own resource; they run concurrently, so they
// share batches.
func TestTreeMatchesDecide(t *testing.T) {
	c := etcdtest.Start(t)
	s := New(c.Client(t), Options{KeyPrefix: "tree:"})
	defer s.Close()
	rng := rand.New(rand.NewPCG(11, 12))
	base := []uint64{0, 1, 1 << 53, math.MaxUint64 - 1}
	mark := func(b uint64) fencestore.Mark {
		m := fencestore.Mark{Token: b + uint64(rng.IntN(2))}
		if rng.IntN(2) == 0 {
			m.Sequence, m.HasSequence = uint64(rng.IntN(3)), true
		}
		return m
	}
	type tcase struct {
		stored fencestore.Mark
		has    bool
		a      fencestore.Admission
	}
	cases := make([]tcase, 1500)
	for i := range cases {
		b := base[rng.IntN(len(base))]
		tc := &cases[i]
		tc.has = rng.IntN(5) != 0
		tc.stored = mark(b)
		am := mark(b)
		tc.a = fencestore.Admission{Resource: fmt.Sprintf("r/%d", i), Token: am.Token, Sequence: am.Sequence,
			HasSequence: am.HasSequence, Compare: fencestore.Compare(rng.IntN(2))}
		if rng.IntN(2) == 0 {
			tc.a.Floor, tc.a.HasFloor = mark(b), true
		}
		if rng.IntN(2) == 0 {
			tc.a.Flight = time.Minute
		}
	}
	cl := c.Client(t)
	ctx := ctxTest(t)
	for _, tc := range cases {
		if tc.has {
			if _, err := cl.Put(ctx, "tree:"+tc.a.Resource, value(tc.stored)); err != nil {
				t.Fatal(err)
			}
		}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for _, tc := range cases {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			got, err := s.Admit(ctx, tc.a)
			if err != nil {
				t.Errorf("stored %v (present %v), Admit(%+v): %v", tc.stored, tc.has, tc.a, err)
				return
			}
			s.Release(got.Flight)
			want, next, write := tc.a.Decide(tc.stored, tc.has)
			if got.Flight.Registered() != (tc.a.Flight > 0 && want.Admitted) {
				t.Errorf("stored %v (present %v), Admit(%+v): flight %+v", tc.stored, tc.has, tc.a, got.Flight)
			}
			got.Flight = fencestore.Flight{}
			if got != want {
				t.Errorf("stored %v (present %v), Admit(%+v) = %+v, want %+v", tc.stored, tc.has, tc.a, got, want)
			}
			resp, err := cl.Get(ctx, "tree:"+tc.a.Resource)
			if err != nil {
				t.Error(err)
				return
			}
			stored := ""
			if len(resp.Kvs) > 0 {
				stored = string(resp.Kvs[0].Value)
			}
			wantStored := ""
			switch {
			case write:
				wantStored = value(next)
			case tc.has:
				wantStored = value(tc.stored)
			}
			if stored != wantStored {
				t.Errorf("stored %v (present %v), Admit(%+v) left %q, want %q", tc.stored, tc.has, tc.a, stored, wantStored)
			}
		})
	}
	wg.Wait()
}

func ctxTest(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

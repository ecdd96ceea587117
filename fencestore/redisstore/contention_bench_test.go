package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// BenchmarkBarrierContention admits, drains and releases requests of
// 1, 10 and 100 writers on one resource with the barrier on: one lease's
// writers, each request a new sequence, so every request is ordered after
// every one admitted before it and waits for those still in flight. It
// reports, per admitted request, what the Redis server did (INFO
// commandstats and INFO cpu, read before and after): calls/op counts every
// command, those the scripts run included; toplevel/op the commands a
// client sent (EVALSHA, EVAL, ZMSCORE: a script run, or a waiter's look);
// redis-µs/op the server's CPU time (used_cpu_user + used_cpu_sys). The
// figures are reported, never asserted: docs/performance.md quotes them.
//
//	go test -run '^$' -bench BarrierContention -benchtime 3000x ./fencestore/redisstore/
func BenchmarkBarrierContention(b *testing.B) {
	srv := redistest.Start(b)
	for _, writers := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			s, prefix := newStore(b, srv, redisstore.Options{})
			ctx := context.Background()
			var mu sync.Mutex // sequences are admitted in their order
			var seq uint64
			var admitted atomic.Int64
			var failed atomic.Value
			before := serverStats(b, srv)
			b.ResetTimer()
			var wg sync.WaitGroup
			for range writers {
				wg.Go(func() {
					for admitted.Add(1) <= int64(b.N) {
						mu.Lock()
						seq++
						d, err := s.Admit(ctx, fencestore.Admission{Resource: "hot", Token: 1, Sequence: seq, HasSequence: true,
							Flight: 30 * time.Second})
						mu.Unlock()
						if err == nil && !d.Admitted {
							err = fmt.Errorf("sequence refused: %+v", d)
						}
						if err == nil && d.Flight.Older {
							_, err = s.Drain(ctx, d.Flight)
						}
						if err != nil {
							failed.Store(err)
							return
						}
						s.Release(d.Flight)
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			if err, _ := failed.Load().(error); err != nil {
				b.Fatal(err)
			}
			// The last releases, before the figures are read.
			redistest.Poll(b, 10*time.Second, "the releases applied", func() error {
				n, err := srv.Client(b).ZCard(ctx, "{"+prefix+"hot}:inflight").Result()
				if err == nil && n != 0 {
					err = fmt.Errorf("%d in flight", n)
				}
				return err
			})
			after := serverStats(b, srv)
			n := float64(b.N)
			b.ReportMetric(float64(after.calls-before.calls)/n, "calls/op")
			b.ReportMetric(float64(after.toplevel-before.toplevel)/n, "toplevel/op")
			b.ReportMetric((after.cpu-before.cpu)*1e6/n, "redis-µs/op")
		})
	}
}

type stats struct {
	calls, toplevel int64
	cpu             float64 // seconds
}

// serverStats reads the server's command counts (INFO itself left out) and
// CPU time.
func serverStats(b testing.TB, srv *redistest.Server) stats {
	b.Helper()
	text, err := srv.Client(b).Info(context.Background(), "commandstats", "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var st stats
	for name, calls := range parseCommandStats(text) {
		switch name {
		case "evalsha", "eval", "zmscore":
			st.toplevel += calls
		}
		st.calls += calls
	}
	for _, line := range strings.Split(text, "\r\n") {
		for _, f := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(line, f); ok {
				x, _ := strconv.ParseFloat(v, 64)
				st.cpu += x
			}
		}
	}
	return st
}

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

// BenchmarkAdmissionCommands is what the Redis server runs per admitted
// request in the common case: 1,000 resources, each request a token above
// every one before on its resource, nothing older in flight, the request
// released (barrier on) after its admission, as the proxy does once its
// exchange has ended. With the barrier (Flight set, FENCE_DRAIN=on) and
// without (FENCE_DRAIN=off); one writer at a time, and 32 at once (the load
// benchmark's connections, whose admissions and releases share pipelines).
// It reports, from INFO commandstats read before and after (INFO itself left
// out), the commands per admission: calls/op every command, those the
// scripts run included; toplevel/op the script runs and looks a client sent;
// per command name (<name>/op), the server's CPU time per admission
// (redis-µs/op: used_cpu_user + used_cpu_sys of INFO cpu), the part of it
// Redis counted in its script runs (script-µs/op: commandstats usec of
// EVALSHA and EVAL, their commands included), and, in each drain=false
// run, redis-on/off: redis-µs/op of the drain=true run just before it
// (same writers, same server) over its own. Reported, never asserted
// (TestAdmissionCommandBudget asserts the counts):
//
//	go test -run '^$' -bench AdmissionCommands -benchtime 2000x ./fencestore/redisstore/
func BenchmarkAdmissionCommands(b *testing.B) {
	srv := redistest.Start(b)
	withDrain := make(map[int]float64) // redis-µs/op with the barrier, by writers
	for _, writers := range []int{1, 32} {
		for _, drain := range []bool{true, false} {
			b.Run(fmt.Sprintf("writers=%d/drain=%v", writers, drain), func(b *testing.B) {
				s, prefix := newStore(b, srv, redisstore.Options{})
				ctx := context.Background()
				var flight time.Duration
				if drain {
					flight = 30 * time.Second
				}
				var next atomic.Int64
				var failed atomic.Value
				admit := func(i int64) error {
					d, err := s.Admit(ctx, fencestore.Admission{Resource: "r" + strconv.FormatInt(i%1000, 10),
						Token: uint64(1_000_000 + i), Flight: flight})
					switch {
					case err != nil:
						return err
					case !d.Admitted:
						return fmt.Errorf("token refused: %+v", d)
					case d.Flight.Older:
						return fmt.Errorf("an older request in flight: %+v", d)
					}
					s.Release(d.Flight)
					return nil
				}
				// Every resource's mark set first, so that the loop is the
				// steady state (no key created).
				for i := range int64(1000) {
					if err := admit(i); err != nil {
						b.Fatal(err)
					}
				}
				next.Store(1000)
				waitReleased(b, srv, prefix)
				before, scriptBefore := commandStats(b, srv), scriptUsec(b, srv)
				cpuBefore := serverStats(b, srv).cpu
				b.ResetTimer()
				var wg sync.WaitGroup
				for range writers {
					wg.Go(func() {
						for {
							i := next.Add(1)
							if i > 1000+int64(b.N) {
								return
							}
							if err := admit(i); err != nil {
								failed.Store(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				if err, _ := failed.Load().(error); err != nil {
					b.Fatal(err)
				}
				waitReleased(b, srv, prefix)
				after, scriptAfter := commandStats(b, srv), scriptUsec(b, srv)
				cpuAfter := serverStats(b, srv).cpu
				n := float64(b.N)
				cpu := (cpuAfter - cpuBefore) * 1e6 / n
				b.ReportMetric(cpu, "redis-µs/op")
				b.ReportMetric((scriptAfter-scriptBefore)/n, "script-µs/op")
				// The barrier's cost, against the run with it just before.
				if drain {
					withDrain[writers] = cpu
				} else if on := withDrain[writers]; on > 0 && cpu > 0 {
					b.ReportMetric(on/cpu, "redis-on/off")
				}
				var calls, top int64
				for name, c := range after {
					d := c - before[name]
					if d == 0 {
						continue
					}
					calls += d
					switch name {
					case "evalsha", "eval", "zmscore":
						top += d
					}
					b.ReportMetric(float64(d)/n, name+"/op")
				}
				b.ReportMetric(float64(calls)/n, "calls/op")
				b.ReportMetric(float64(top)/n, "toplevel/op")
			})
		}
	}
}

// waitReleased waits until no entry of prefix's resources is in flight: the
// releases, sent in the background, applied.
func waitReleased(b *testing.B, srv *redistest.Server, prefix string) {
	b.Helper()
	c := srv.Client(b)
	redistest.Poll(b, 10*time.Second, "the releases applied", func() error {
		keys, err := c.Keys(context.Background(), "{"+prefix+"*}:inflight").Result()
		if err == nil && len(keys) != 0 {
			var n int64
			for _, k := range keys {
				m, _ := c.ZCard(context.Background(), k).Result()
				n += m
			}
			if n != 0 {
				err = fmt.Errorf("%d in flight", n)
			}
		}
		return err
	})
}

// commandStats returns the calls of each command in INFO commandstats (INFO
// itself, and the commands this benchmark sends to look, left out).
func commandStats(b *testing.B, srv *redistest.Server) map[string]int64 {
	b.Helper()
	text, err := srv.Client(b).Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	out := parseCommandStats(text)
	delete(out, "keys")
	delete(out, "zcard")
	return out
}

// parseCommandStats reads the calls of each command from INFO's
// commandstats section, INFO itself left out.
func parseCommandStats(text string) map[string]int64 {
	out := make(map[string]int64)
	for _, line := range strings.Split(text, "\r\n") {
		if name, rest, ok := strings.Cut(line, ":calls="); ok {
			name = strings.TrimPrefix(name, "cmdstat_")
			if name == "info" {
				continue
			}
			calls, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			out[name] = calls
		}
	}
	return out
}

// scriptUsec returns the microseconds Redis counted in its script runs
// (EVALSHA and EVAL in INFO commandstats: its own timing, the commands the
// scripts ran included, the network not).
func scriptUsec(b *testing.B, srv *redistest.Server) float64 {
	b.Helper()
	text, err := srv.Client(b).Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var usec float64
	for _, line := range strings.Split(text, "\r\n") {
		name, rest, ok := strings.Cut(line, ":calls=")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		if _, u, ok := strings.Cut(rest, ",usec="); ok {
			u, _, _ = strings.Cut(u, ",")
			x, _ := strconv.ParseFloat(u, 64)
			usec += x
		}
	}
	return usec
}

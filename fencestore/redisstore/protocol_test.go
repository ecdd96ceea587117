package redisstore_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
	"github.com/fenceproxy/fenceproxy/fencestore/storetest"
)

// The package's tests speak RESP2, as fenceproxy's client does by default
// (redistest's Options); FENCE_REDIS_URL's protocol=3 chooses RESP3, whose
// replies the store must read alike: the conformance suite (the barrier
// included), batched and not.
func TestConformanceRESP3(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range batchings {
		t.Run(tc.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) fencestore.Store {
				opt := srv.Options()
				opt.Protocol = 3
				s, _ := newStoreWith(t, opt, tc.opts)
				return s
			})
		})
	}
}

// BenchmarkAdmitProtocol is BenchmarkAdmit's single caller in RESP2 and in
// RESP3, with the CPU time of this process (the store's side: go-redis
// and the batcher; Redis is another process) per admission. Reported,
// never asserted:
//
//	go test -run '^$' -bench AdmitProtocol -benchtime 30000x -count 6 ./fencestore/redisstore/
func BenchmarkAdmitProtocol(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		b.Run(fmt.Sprintf("resp=%d", proto), func(b *testing.B) {
			opt := srv.Options()
			opt.Protocol = proto
			s, _ := newStoreWith(b, opt, redisstore.Options{})
			b.ReportAllocs()
			var token uint64
			c0 := cpuTime()
			for b.Loop() {
				token++
				if _, err := s.Admit(ctx, fencestore.Admission{Resource: "bench", Token: token, Compare: fencestore.AtLeast}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((cpuTime()-c0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
		})
	}
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

package etcdstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore/etcdtest"
)

// BenchmarkAdmit: one member (fsync on), one client. "serial" is the
// latency of one admission; "parallel" runs 64 goroutines per CPU over 16
// resources, whose admissions share batches (at most one of each resource
// in a batch: batch.go).
func BenchmarkAdmit(b *testing.B) {
	c := etcdtest.Start(b)
	ctx := context.Background()
	for _, flight := range []time.Duration{0, 30 * time.Second} {
		name := "plain"
		if flight > 0 {
			name = "flight"
		}
		b.Run(name+"/serial", func(b *testing.B) {
			s := etcdstore.New(c.Client(b), etcdstore.Options{KeyPrefix: fmt.Sprintf("bench-%s-serial:", name)})
			defer s.Close()
			var token uint64
			b.ReportAllocs()
			for b.Loop() {
				token++
				d, err := s.Admit(ctx, fencestore.Admission{Resource: "bench", Token: token, Flight: flight})
				if err != nil {
					b.Fatal(err)
				}
				s.Release(d.Flight)
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			s := etcdstore.New(c.Client(b), etcdstore.Options{KeyPrefix: fmt.Sprintf("bench-%s-parallel:", name)})
			defer s.Close()
			var token, res atomic.Uint64
			b.SetParallelism(64)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := fmt.Sprintf("bench/%d", res.Add(1)%16)
				for pb.Next() {
					d, err := s.Admit(ctx, fencestore.Admission{Resource: r, Token: token.Add(1), Flight: flight})
					if err != nil {
						b.Error(err)
						return
					}
					s.Release(d.Flight)
				}
			})
		})
	}
}

package etcdstore

import (
	"context"
	"testing"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// BenchmarkPrepare is the client-side cost of one admission's transaction
// (the plan, its tree and its encoded size), without etcd.
func BenchmarkPrepare(b *testing.B) {
	k := newLayout("bench:")
	ctx := context.Background()
	for _, flight := range []bool{false, true} {
		name := "plain"
		if flight {
			name = "flight"
		}
		b.Run(name, func(b *testing.B) {
			a := fencestore.Admission{Resource: "orders/42", Token: 42}
			var fl *flightReg
			if flight {
				fl = &flightReg{key: flightKey(k.flightRange(a.Resource), a.Order(), "0123456789abcdef.0000000000000001"), lease: &lease{id: 7}}
			}
			b.ReportAllocs()
			for b.Loop() {
				_ = prepare(ctx, newPlan(k, a, fl, false), "")
			}
		})
	}
}

package etcdstore

import (
	"context"
	"testing"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// BenchmarkPrepare is the client-side cost of one admission's transaction
// (the plan, its tree and its encoded size), without etcd. "floor" carries
// a remembered mark; "floor-generation" weighs it against the operator's
// last change too (the tree built twice under one more comparison), as
// every admission with a floor does once the identity is expected.
func BenchmarkPrepare(b *testing.B) {
	k := newLayout("bench:")
	ctx := context.Background()
	for _, tc := range []struct {
		name          string
		flight, floor bool
		generation    bool
	}{
		{name: "plain"},
		{name: "flight", flight: true},
		{name: "floor", floor: true},
		{name: "floor-generation", floor: true, generation: true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			a := fencestore.Admission{Resource: "orders/42", Token: 42}
			if tc.floor {
				a.Floor, a.HasFloor, a.FloorGeneration = fencestore.Mark{Token: 41}, true, 1000
			}
			var fl *flightReg
			if tc.flight {
				fl = &flightReg{key: flightKey(k.flightRange(a.Resource), a.Order(), "0123456789abcdef.0000000000000001"), lease: &lease{id: 7}}
			}
			b.ReportAllocs()
			for b.Loop() {
				_ = prepare(ctx, newPlan(k, a, fl, tc.generation), "")
			}
		})
	}
}

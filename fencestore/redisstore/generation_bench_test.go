package redisstore_test

import (
	"context"
	"testing"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// BenchmarkAdmitGeneration is the cost of the identity and generation
// checks on the common path: one admission at a time against a local
// redis-server, without them (no identity expected) and with them (the
// identity read, the generation compared and advanced, all in the one
// script run: still one round trip).
func BenchmarkAdmitGeneration(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	for _, checked := range []bool{false, true} {
		name := "unchecked"
		if checked {
			name = "identity+generation"
		}
		b.Run(name, func(b *testing.B) {
			s, _ := newStore(b, srv, redisstore.Options{MaxBatch: -1})
			if checked {
				id, err := s.Init(ctx, false)
				if err != nil {
					b.Fatal(err)
				}
				s.Expect(id)
			}
			var token uint64
			for b.Loop() {
				token++
				if _, err := s.Admit(ctx, fencestore.Admission{Resource: "bench", Token: token}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

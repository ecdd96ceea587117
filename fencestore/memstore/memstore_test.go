package memstore_test

import (
	"context"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
	"github.com/fenceproxy/fenceproxy/fencestore/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) fencestore.Store { return memstore.New() })
}

func BenchmarkAdmit(b *testing.B) {
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		s := memstore.New()
		defer s.Close()
		b.ReportAllocs()
		var token uint64
		for b.Loop() {
			token++
			if _, err := s.Admit(ctx, fencestore.Admission{Resource: "bench", Token: token, Compare: fencestore.AtLeast}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		s := memstore.New()
		defer s.Close()
		var token atomic.Uint64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.Admit(ctx, fencestore.Admission{Resource: "bench", Token: token.Add(1), Compare: fencestore.AtLeast}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

func TestKeeperConformance(t *testing.T) {
	storetest.RunKeeper(t,
		func(*testing.T) storetest.KeeperStore { return memstore.New() },
		func(_ *testing.T, s storetest.KeeperStore) { s.(*memstore.Store).Clear() })
}

func TestGeneration(t *testing.T) {
	storetest.RunGeneration(t,
		func(*testing.T) storetest.KeeperStore { return memstore.New() },
		func(_ *testing.T, s storetest.KeeperStore, to uint64) { s.(*memstore.Store).Restore(to) })
}

package fencejwt

import (
	"strconv"
	"testing"
	"time"
)

// The benchmarks' tokens look like the lease service's: a fence above 2^53,
// an exp, and a res naming one resource.
func benchClaims(i int) Claims {
	return Claims{Fence: 1_764_500_000_000_000_000 + uint64(i), Expiry: t0.Add(time.Hour), Resource: "orders/" + strconv.Itoa(i)}
}

// BenchmarkVerify is one uncached check of a signed token (Verify: parse,
// key lookup, signature, claims), per algorithm: what a request costs when
// its token is not in the Verifier's cache (a new token, or a replica that
// has not seen it yet).
func BenchmarkVerify(b *testing.B) {
	signers, ks, _ := newKeys(b)
	now := t0.Add(time.Minute)
	for _, kind := range []string{KindEdDSA, KindES256, KindHS256} {
		b.Run(kind, func(b *testing.B) {
			tok := sign(b, signers[kind], benchClaims(42))
			b.ReportMetric(float64(len(tok)), "token-bytes")
			b.ReportAllocs()
			for b.Loop() {
				c, err := Verify(tok, ks, now, 5*time.Second)
				if err != nil || c.Fence != benchClaims(42).Fence {
					b.Fatal(c, err)
				}
			}
		})
	}
}

// BenchmarkVerifierCached is a cache hit: the Verifier has verified the
// token before (the holder's second and later requests with one token).
// Parallel: every core at once, 1,000 tokens spread over the shards.
func BenchmarkVerifierCached(b *testing.B) {
	signers, ks, _ := newKeys(b)
	toks := make([]string, 1000)
	for i := range toks {
		toks[i] = sign(b, signers[KindEdDSA], benchClaims(i))
	}
	v := NewVerifier(ks, 5*time.Second, 0)
	v.now = func() time.Time { return t0.Add(time.Minute) }
	for _, tok := range toks {
		if _, err := v.Verify(tok); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := v.Verify(toks[i%len(toks)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if _, err := v.Verify(toks[i%len(toks)]); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
	})
}

// BenchmarkVerifierMiss is the Verifier with a token it has not seen
// (EdDSA): Verify plus remembering the token, with the shard pruning a full
// cache pays. The cache holds 1,024 tokens and the loop cycles through
// 8,192, so nearly every call misses (an entry survives a prune with
// probability 1/2, and a shard prunes about 8 times between two uses of a
// token); compare with BenchmarkVerify/EdDSA for what the cache adds to a
// miss.
func BenchmarkVerifierMiss(b *testing.B) {
	signers, ks, _ := newKeys(b)
	toks := make([]string, 8192)
	for i := range toks {
		toks[i] = sign(b, signers[KindEdDSA], benchClaims(i))
	}
	v := NewVerifier(ks, 5*time.Second, 1024)
	v.now = func() time.Time { return t0.Add(time.Minute) }
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := v.Verify(toks[i%len(toks)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

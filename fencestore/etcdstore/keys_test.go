package etcdstore

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

func TestValueFormat(t *testing.T) {
	for _, c := range []struct {
		m fencestore.Mark
		v string
	}{
		{fencestore.Mark{}, "00000000000000000000"},
		{fencestore.Mark{Token: 42}, "00000000000000000042"},
		{fencestore.Mark{Token: 42, Sequence: 7, HasSequence: true}, "00000000000000000042:00000000000000000007"},
		{fencestore.Mark{Token: math.MaxUint64, Sequence: math.MaxUint64, HasSequence: true}, "18446744073709551615:18446744073709551615"},
	} {
		if got := value(c.m); got != c.v {
			t.Errorf("value(%+v) = %q, want %q", c.m, got, c.v)
		}
		if m, ok := parseValue([]byte(c.v)); !ok || m != c.m {
			t.Errorf("parseValue(%q) = %+v, %v", c.v, m, ok)
		}
	}
	for _, bad := range []string{"", "0", "42", "0000000000000000042", "000000000000000000042", "18446744073709551616",
		"99999999999999999999", "0000000000000000004x", "00000000000000000042:", "00000000000000000042:7",
		"00000000000000000042-00000000000000000007", "00000000000000000042:0000000000000000000x",
		"00000000000000000042:18446744073709551616", "+0000000000000000042", " 0000000000000000042"} {
		if m, ok := parseValue([]byte(bad)); ok {
			t.Errorf("parseValue(%q) = %+v, accepted", bad, m)
		}
	}
}

// The byte order of values and of in-flight orders is Mark.Before's order:
// what the admission transaction and the older-range read rely on.
func TestByteOrderIsMarkOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	edges := []uint64{0, 1, 9, 10, 99, 100, 1 << 53, 1<<53 + 1, 9999999999999999999, 10000000000000000000, math.MaxUint64 - 1, math.MaxUint64}
	pick := func() fencestore.Mark {
		n := func() uint64 {
			if rng.IntN(2) == 0 {
				return edges[rng.IntN(len(edges))]
			}
			return rng.Uint64() >> rng.UintN(64)
		}
		m := fencestore.Mark{Token: n()}
		if rng.IntN(2) == 0 {
			m.Sequence, m.HasSequence = n(), true
		}
		return m
	}
	order := func(m fencestore.Mark) string { return string(appendOrder(nil, m)) }
	for range 20000 {
		a, b := pick(), pick()
		if rng.IntN(4) == 0 {
			b.Token = a.Token
		}
		if got, want := value(a) < value(b), a.Before(b); got != want {
			t.Fatalf("value(%+v) < value(%+v) = %v, Before = %v", a, b, got, want)
		}
		if got, want := order(a) < order(b), a.Before(b); got != want {
			t.Fatalf("order(%+v) < order(%+v) = %v, Before = %v", a, b, got, want)
		}
		// The ">=" admit bound: every mark of a token sorts below token+";",
		// every mark of a greater token above it.
		bound := value(fencestore.Mark{Token: a.Token}) + ";"
		if got, want := value(b) < bound, b.Token <= a.Token; got != want {
			t.Fatalf("value(%+v) < %q = %v, want %v", b, bound, got, want)
		}
	}
}

func TestFlightKeys(t *testing.T) {
	l := newLayout("fence:")
	id := strings.Repeat("a", 16) + "." + strings.Repeat("0", 16)
	o41 := fencestore.Mark{Token: 41}
	k := flightKey(l.flightRange("orders/42"), o41, id)
	if want := "fence:\x00inflight/0000000009orders/4200000000000000000041:--------------------/" + id; k != want {
		t.Fatalf("flightKey = %q, want %q", k, want)
	}
	from, end, ok := olderRange(k)
	if !ok || from != l.flightRange("orders/42") || end != from+string(appendOrder(nil, o41)) {
		t.Fatalf("olderRange = %q, %q, %v", from, end, ok)
	}
	// Two resources' ranges never overlap, whatever bytes their names hold:
	// a key of one is never inside the other's range.
	names := []string{"a", "a\x00", "a\x0000000000000000000041:", "a/", "ab", "b", "a" + strings.Repeat("0", 60)}
	for _, n1 := range names {
		for _, n2 := range names {
			if n1 == n2 {
				continue
			}
			k := flightKey(l.flightRange(n2), fencestore.Mark{Token: 1}, id)
			r := l.flightRange(n1)
			if strings.HasPrefix(k, r) {
				t.Errorf("a key of %q (%q) is in the range of %q", n2, k, n1)
			}
		}
	}
	// In-flight keys, and the identity record, are not marks.
	if !(l.identity < l.marksFrom && k < l.marksFrom && l.markKey("\x01") >= l.marksFrom) {
		t.Fatal("identity or in-flight key inside the marks' range")
	}
	if _, _, ok := olderRange("fence:orders/42"); ok {
		t.Fatal("olderRange accepted a mark key")
	}
}

// A lease only collects the records nobody released or abandoned: its TTL
// is the flight, rounded up to whole seconds, plus gcAfter (two days).
func TestLeaseTTL(t *testing.T) {
	gc := int64(gcAfter / time.Second)
	for _, c := range []struct {
		flight time.Duration
		ttl    int64
	}{
		{time.Millisecond, 1 + gc}, {400 * time.Millisecond, 1 + gc}, {time.Second, 1 + gc}, {time.Second + 1, 2 + gc},
		{30 * time.Second, 30 + gc}, {time.Duration(math.MaxInt64), maxLeaseTTL},
	} {
		if got := ttlFor(c.flight); got != c.ttl {
			t.Errorf("ttlFor(%v) = %d, want %d", c.flight, got, c.ttl)
		}
	}
	now := time.Now()
	l := &lease{sent: now, ttl: 31 * time.Second}
	if !l.covers(now.Add(time.Second), 30*time.Second) || l.covers(now.Add(time.Second+1), 30*time.Second) {
		t.Fatal("covers: a 31s lease covers a 30s flight for exactly 1s after its grant was sent")
	}
}

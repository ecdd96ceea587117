package main

import (
	"testing"
	"time"
)

func TestPct(t *testing.T) {
	xs := make([]time.Duration, 100)
	for i := range xs {
		xs[i] = time.Duration(i+1) * time.Millisecond
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {0.999, 100 * time.Millisecond}, {1, 100 * time.Millisecond}} {
		if got := pct(xs, c.q); got != c.want {
			t.Errorf("pct(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if got := pct(nil, 0.5); got != 0 {
		t.Errorf("pct(nil) = %v", got)
	}
}

// A request that fails still counts, with the time it waited, so a target
// that times out cannot look fast.
func TestDescribeCountsFailures(t *testing.T) {
	s := describe([]sample{
		{latency: time.Millisecond, status: 200},
		{latency: 2 * time.Millisecond, status: 409},
		{latency: 5 * time.Second, err: true},
	})
	if s.n != 3 || s.non2xx != 1 || s.errors != 1 || s.max != 5*time.Second || s.statuses[409] != 1 {
		t.Fatalf("describe = %+v", s)
	}
}

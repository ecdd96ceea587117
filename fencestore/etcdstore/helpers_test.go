package etcdstore_test

import (
	"fmt"
	"slices"
	"time"
)

// quantiles formats the median, 90th and 99th percentiles and the maximum.
func quantiles(d []time.Duration) string {
	if len(d) == 0 {
		return "no samples"
	}
	s := slices.Clone(d)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return fmt.Sprintf("n=%d p50=%v p90=%v p99=%v max=%v", len(s), q(0.5).Round(time.Microsecond),
		q(0.9).Round(time.Microsecond), q(0.99).Round(time.Microsecond), s[len(s)-1].Round(time.Microsecond))
}

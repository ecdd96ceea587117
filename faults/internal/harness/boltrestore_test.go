package harness

import (
	"strings"
	"testing"
)

// bolt-restore's expectations fail on each way the file-only variant can go
// wrong, and never on the with-generation-file variant's figures (the
// documented limit, measured).
func TestExpectBoltRestore(t *testing.T) {
	good := func() []*boltVariant {
		return []*boltVariant{
			{name: "file-only", sent: 5, storeLost: 5, lostMetric: 1, recovered: true},
			{name: "with-generation-file", sent: 5, admitted: 5, forwarded: 5},
		}
	}
	for _, tc := range []struct {
		name  string
		brk   string
		spoil func(v []*boltVariant) []*boltVariant
		want  string // a problem containing this; "" none
	}{
		{name: "as it should", spoil: func(v []*boltVariant) []*boltVariant { return v }},
		{name: "a stale token admitted", spoil: func(v []*boltVariant) []*boltVariant { v[0].storeLost, v[0].admitted = 4, 1; return v }, want: "4 of 5"},
		{name: "a stale token forwarded", spoil: func(v []*boltVariant) []*boltVariant { v[0].forwarded = 1; return v }, want: "reached the upstream"},
		{name: "the metric not set", spoil: func(v []*boltVariant) []*boltVariant { v[0].lostMetric = 0; return v }, want: "fenceproxy_store_lost"},
		{name: "no recovery", spoil: func(v []*boltVariant) []*boltVariant { v[0].recovered = false; return v }, want: "runbook"},
		{name: "nothing sent", spoil: func(v []*boltVariant) []*boltVariant { v[0].sent, v[0].storeLost = 0, 0; return v }, want: "0 of 0"},
		{name: "one variant only", spoil: func(v []*boltVariant) []*boltVariant { return v[:1] }, want: "both variants"},
		{name: "the control expects nothing", brk: "nogeneration", spoil: func(v []*boltVariant) []*boltVariant { v[0].storeLost = 0; return v }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &env{opts: Options{Break: tc.brk}, bolt: tc.spoil(good())}
			got := strings.Join(expectBoltRestore(e, nil), "; ")
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("problems %q, want one containing %q", got, tc.want)
			}
		})
	}
}

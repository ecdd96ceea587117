package proxy

import (
	"strings"
	"testing"
)

// The parsers run on every request before anything else, so their
// allocation counts are part of what they promise. Allocation counts are
// deterministic (unlike timings), so they are asserted in tests; the
// benchmarks below only report.

func TestParseTokenAllocs(t *testing.T) {
	tests := []struct {
		name   string
		values []string
	}{
		{name: "success", values: []string{"1844674407370955161"}},
		{name: "success trimmed", values: []string{" 42\t"}},
		{name: "absent", values: nil},
		{name: "repeated", values: []string{"1", "2"}},
		{name: "list", values: []string{"1,2"}},
		{name: "empty", values: []string{" "}},
		{name: "not decimal", values: []string{"-1"}},
		{name: "leading zero", values: []string{"007"}},
		{name: "too long", values: []string{"100000000000000000000"}},
		{name: "out of range", values: []string{"18446744073709551616"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			allocs := testing.AllocsPerRun(100, func() {
				_, _ = ParseToken(tt.values)
			})
			if allocs != 0 {
				t.Errorf("ParseToken(%q) allocates %v times, want 0", tt.values, allocs)
			}
		})
	}
}

// The sequence shares the token's parser and its allocation count.
func TestParseSequenceAllocs(t *testing.T) {
	for _, values := range [][]string{{"1844674407370955161"}, {" 42\t"}, nil, {"1", "2"}, {"1,2"}, {" "}, {"-1"}, {"007"}, {"18446744073709551616"}} {
		allocs := testing.AllocsPerRun(100, func() {
			_, _ = ParseSequence(values)
		})
		if allocs != 0 {
			t.Errorf("ParseSequence(%q) allocates %v times, want 0", values, allocs)
		}
	}
}

func TestCanonicalPathAllocs(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		allocs float64
	}{
		{name: "canonical", in: "/orders/42", allocs: 0},
		{name: "root", in: "/", allocs: 0},
		{name: "empty", in: "", allocs: 0},
		{name: "canonical long", in: strings.Repeat("/segment", 200), allocs: 0},
		{name: "refused encoded slash", in: "/orders%2F42", allocs: 0},
		{name: "refused semicolon", in: "/orders/42;x=1", allocs: 0},
		{name: "refused bad escape", in: "/%zz", allocs: 0},
		{name: "resolves to root", in: "/a/..", allocs: 0},
		// Anything that must be rewritten costs exactly the result string.
		{name: "trailing slash", in: "/orders/42/", allocs: 1},
		{name: "needs work", in: "/orders/./x/../%34%32/", allocs: 1},
		{name: "needs work long", in: strings.Repeat("/seg%41/./x/..", 200), allocs: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			allocs := testing.AllocsPerRun(100, func() {
				_, _, _ = CanonicalPath(tt.in)
			})
			if allocs != tt.allocs {
				t.Errorf("CanonicalPath(%q) allocates %v times, want %v", tt.in, allocs, tt.allocs)
			}
		})
	}
}

// Sinks keep the compiler from discarding the calls being measured.
var (
	benchTokenSink uint64
	benchPathSink  string
)

func BenchmarkParseToken(b *testing.B) {
	values := []string{"1844674407370955161"} // 19 digits
	b.ReportAllocs()
	for b.Loop() {
		v, err := ParseToken(values)
		if err != nil {
			b.Fatal(err)
		}
		benchTokenSink = v
	}
}

func BenchmarkCanonicalPath(b *testing.B) {
	for _, bc := range []struct{ name, in string }{
		{name: "canonical", in: "/orders/12345/items/67890"},
		{name: "needs-work", in: "/orders//12345/./items/x/../%36%37%38%39%30/"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				canon, _, err := CanonicalPath(bc.in)
				if err != nil {
					b.Fatal(err)
				}
				benchPathSink = canon
			}
		})
	}
}

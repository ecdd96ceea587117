package main

import (
	"bufio"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func parse(t *testing.T, out string) *features {
	t.Helper()
	ft, err := parseFeatures(bufio.NewScanner(strings.NewReader(out)))
	if err != nil {
		t.Fatal(err)
	}
	if ft != nil {
		ft.compute()
	}
	return ft
}

// TestParseFeatures reads go test's output by sub-benchmark name, whatever
// the names are: medians over -count runs, GOMAXPROCS's "-N" taken off only
// when every name carries it, failures named, nothing measured is nil.
func TestParseFeatures(t *testing.T) {
	for _, c := range []struct {
		name, out string
		want      []featureRow // Name, Runs, Ns, NsLo, NsHi, Bytes, Allocs
		procs     int
		failed    string
		isNil     bool
	}{
		{name: "one run, GOMAXPROCS=1", out: "cpu: X\nBenchmarkFeature/shipped   \t 100\t 1000 ns/op\t 400 B/op\t 4 allocs/op\n" +
			"BenchmarkFeature/no-drain-2 \t 100\t 900 ns/op\t 300 B/op\t 3 allocs/op\nPASS\n",
			// "-2" is a name's own here: shipped has no suffix
			want: []featureRow{{Name: "shipped", Runs: 1, Ns: 1000, NsLo: 1000, NsHi: 1000, Bytes: 400, Allocs: 4},
				{Name: "no-drain-2", Runs: 1, Ns: 900, NsLo: 900, NsHi: 900, Bytes: 300, Allocs: 3}}, procs: 1},
		{name: "three runs, GOMAXPROCS=4", out: "BenchmarkFeature/shipped-4 1 1000 ns/op 10 B/op 1 allocs/op\n" +
			"BenchmarkFeature/shipped-4 1 3000 ns/op 10 B/op 1 allocs/op\nBenchmarkFeature/shipped-4 1 1100 ns/op 12 B/op 1 allocs/op\n",
			want: []featureRow{{Name: "shipped", Runs: 3, Ns: 1100, NsLo: 1000, NsHi: 3000, Bytes: 10, Allocs: 1}}, procs: 4},
		{name: "without -benchmem", out: "BenchmarkFeature/x 10 5.5 ns/op\n",
			want: []featureRow{{Name: "x", Runs: 1, Ns: 5.5, NsLo: 5.5, NsHi: 5.5, Bytes: math.NaN(), Allocs: math.NaN()}}, procs: 1},
		{name: "a failure beside results", out: "BenchmarkFeature/a 10 5 ns/op\n--- FAIL: BenchmarkFeature/b\n    x_test.go:1: boom\nFAIL\n",
			want: []featureRow{{Name: "a", Runs: 1, Ns: 5, NsLo: 5, NsHi: 5, Bytes: math.NaN(), Allocs: math.NaN()}}, procs: 1, failed: "b"},
		{name: "only failures", out: "--- FAIL: BenchmarkFeature/b\n", failed: "b"},
		{name: "other benchmarks only", out: "BenchmarkServeHTTP 10 5 ns/op\nok\n", isNil: true},
		{name: "empty", out: "", isNil: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ft := parse(t, c.out)
			if c.isNil {
				if ft != nil {
					t.Fatalf("got %+v, want nil", ft)
				}
				return
			}
			if ft == nil {
				t.Fatal("nil")
			}
			if got := strings.Join(ft.Failed, ","); got != c.failed {
				t.Errorf("Failed = %q, want %q", got, c.failed)
			}
			if len(c.want) > 0 && ft.Procs != c.procs {
				t.Errorf("Procs = %d, want %d", ft.Procs, c.procs)
			}
			if len(ft.Rows) != len(c.want) {
				t.Fatalf("rows %+v, want %+v", ft.Rows, c.want)
			}
			for i, w := range c.want {
				g := ft.Rows[i]
				if g.Name != w.Name || g.Runs != w.Runs || !same(g.Ns, w.Ns) || !same(g.NsLo, w.NsLo) || !same(g.NsHi, w.NsHi) ||
					!same(g.Bytes, w.Bytes) || !same(g.Allocs, w.Allocs) || !math.IsNaN(g.Instr) {
					t.Errorf("row %d = %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

func same(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }

// TestFeatureCosts: a feature switched off costs shipped − no-X, anything
// else costs itself − shipped; harness-only and shipped have no cost; with
// harness-only and plain-reverseproxy, fenceproxy's own work is set against
// a plain ReverseProxy's.
func TestFeatureCosts(t *testing.T) {
	ft := parse(t, strings.Join([]string{
		"BenchmarkFeature/shipped 1 10000 ns/op 4000 B/op 40 allocs/op",
		"BenchmarkFeature/no-drain 1 9000 ns/op 3500 B/op 35 allocs/op",
		"BenchmarkFeature/tracing-unsampled 1 12500 ns/op 9000 B/op 90 allocs/op",
		"BenchmarkFeature/harness-only 1 2000 ns/op 1000 B/op 15 allocs/op",
		"BenchmarkFeature/plain-reverseproxy 1 6000 ns/op 30000 B/op 34 allocs/op",
	}, "\n"))
	want := map[string]struct {
		kind, feature string
		ns, allocs    float64
	}{
		"shipped":            {"reference", "shipped", math.NaN(), math.NaN()},
		"no-drain":           {"off", "drain", 1000, 5},
		"tracing-unsampled":  {"other", "tracing-unsampled", 2500, 50},
		"harness-only":       {"harness", "harness-only", math.NaN(), math.NaN()},
		"plain-reverseproxy": {"other", "plain-reverseproxy", -4000, -6},
	}
	for _, r := range ft.Rows {
		w := want[r.Name]
		if r.Kind != w.kind || r.Feature != w.feature || !same(r.CostNs, w.ns) || !same(r.CostAllocs, w.allocs) {
			t.Errorf("%s: kind %s feature %s cost %v ns %v allocs, want %+v", r.Name, r.Kind, r.Feature, r.CostNs, r.CostAllocs, w)
		}
	}
	if !ft.Shipped || !ft.Has("no-drain") || ft.Has("drain") {
		t.Errorf("Shipped %v, Has(no-drain) %v, Has(drain) %v", ft.Shipped, ft.Has("no-drain"), ft.Has("drain"))
	}
	if o := ft.Own; o == nil || o.Ns != 8000 || o.PlainNs != 4000 || o.Ratio != 2 || o.Allocs != 25 || !math.IsNaN(o.InstrRatio) {
		t.Errorf("Own = %+v, want 8000 ns against 4000, ratio 2, 25 allocations, no instructions", o)
	}
	// without shipped: no costs, no own work
	ft = parse(t, "BenchmarkFeature/no-drain 1 9000 ns/op\nBenchmarkFeature/harness-only 1 2000 ns/op\nBenchmarkFeature/plain-reverseproxy 1 6000 ns/op\n")
	if ft.Shipped || ft.Own != nil || !math.IsNaN(ft.Rows[0].CostNs) {
		t.Errorf("without shipped: Shipped %v Own %+v cost %v", ft.Shipped, ft.Own, ft.Rows[0].CostNs)
	}
}

// TestFeaturesCallgrind: instructions per request are the difference of the
// two runs over the difference of their requests; a malformed file is an
// error that names it.
func TestFeaturesCallgrind(t *testing.T) {
	for _, c := range []struct {
		name, tsv, err string
		shipped, cost  float64
	}{
		{name: "counted", tsv: "name\tn1\tir1\tn2\tir2\nshipped\t1000\t5000000\t11000\t105000000\nno-drain\t1000\t4000000\t11000\t94000000\n",
			shipped: 10000, cost: 1000},
		{name: "n2 not above n1", tsv: "name\tn1\tir1\tn2\tir2\nshipped\t1000\t5\t1000\t9\n", err: "n2 1000 not above n1 1000"},
		{name: "not a number", tsv: "name\tn1\tir1\tn2\tir2\nshipped\t1000\t\t11000\t9\n", err: "features-callgrind.tsv:2: column ir1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			out := "BenchmarkFeature/shipped 1 1000 ns/op\nBenchmarkFeature/no-drain 1 900 ns/op\n"
			for name, text := range map[string]string{"features.out": out, "features-callgrind.tsv": c.tsv} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ft, err := loadFeatures(dir)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want one with %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !ft.Callgrind || ft.CGRequests != 10000 || ft.Rows[0].Instr != c.shipped || ft.Rows[1].CostInstr != c.cost {
				t.Errorf("callgrind %v over %d: shipped %v, no-drain's cost %v; want %v, %v", ft.Callgrind, ft.CGRequests,
					ft.Rows[0].Instr, ft.Rows[1].CostInstr, c.shipped, c.cost)
			}
		})
	}
	if ft, err := loadFeatures(t.TempDir()); ft != nil || err != nil {
		t.Errorf("no features.out: %+v, %v; want nil, nil", ft, err)
	}
}

// FuzzParseFeatures: any output parses without a panic, and every row it
// keeps is a named sub-benchmark with at least one run.
func FuzzParseFeatures(f *testing.F) {
	f.Add("BenchmarkFeature/shipped-2 \t 100\t 1000 ns/op\t 400 B/op\t 4 allocs/op\n")
	f.Add("--- FAIL: BenchmarkFeature/x\nBenchmarkFeature/a-1 1 1e3 ns/op\n")
	f.Fuzz(func(t *testing.T, out string) {
		ft, err := parseFeatures(bufio.NewScanner(strings.NewReader(out)))
		if err != nil || ft == nil {
			return
		}
		ft.compute()
		for _, r := range ft.Rows {
			if r.Name == "" || r.Runs < 1 {
				t.Fatalf("row %+v from %q", r, out)
			}
		}
	})
}

package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// features is what BenchmarkFeature (proxy/feature_bench_test.go) measured in
// the run's features phase: bench/features.sh's go test output
// (features.out) and, when it ran callgrind, the instruction counts
// (features-callgrind.tsv). Its sub-benchmarks are read by name, whatever
// they are: "shipped" is the reference, "no-X" is shipped with X switched
// off (X costs shipped − no-X), any other name is shipped with something
// switched on or changed (it costs itself − shipped), and "harness-only" is
// the benchmark's own work, which the doc takes off "shipped" and
// "plain-reverseproxy" to compare fenceproxy's own work with a plain
// httputil.ReverseProxy's.
type features struct {
	Count      int      // runs per sub-benchmark (go test -count)
	Benchtime  string   // as given to go test, from the output's header comment ("": default)
	CPU        string   // go test's "cpu:" line
	Procs      int      // GOMAXPROCS: the "-N" go test appends to every name, else 1
	Load       []string // the machine's 1-minute load average before and after ("# loadavg" comments)
	Failed     []string // sub-benchmarks go test reported as failed ("--- FAIL: BenchmarkFeature/x")
	Rows       []featureRow
	Shipped    bool // a "shipped" sub-benchmark was measured: the differences are known
	Callgrind  bool // instruction counts were measured
	CGRequests int  // the requests whose instructions were counted per sub-benchmark
	// fenceproxy's own work (shipped − harness-only) and httputil.ReverseProxy's
	// (plain-reverseproxy − harness-only), when the three were measured
	Own *ownWork
}

type featureRow struct {
	Name                 string
	Runs                 int
	Ns, NsLo, NsHi       float64 // ns/op: median and range of the runs
	Bytes, Allocs        float64 // B/op, allocs/op: medians
	Instr                float64 // instructions per request (NaN: not counted)
	Kind                 string  // "reference", "off" (no-X), "harness", "other"
	Feature              string  // X of no-X, else the name
	CostNs, CostAllocs   float64 // what the feature costs a request (shipped − no-X, or X − shipped); NaN without shipped
	CostBytes, CostInstr float64
}

type ownWork struct {
	Ns, PlainNs, Ratio            float64 // ns per request; fenceproxy ÷ plain
	Instr, PlainInstr, InstrRatio float64 // NaN: not counted
	Allocs, PlainAllocs           float64
}

// benchLine is one result line of go test -bench -benchmem:
// "BenchmarkFeature/no-drain-2   	  123456	      9876 ns/op	    4321 B/op	      42 allocs/op".
var benchLine = regexp.MustCompile(`^BenchmarkFeature/(\S+)\s+\d+\s+([0-9.e+]+) ns/op(?:\s+([0-9.e+]+) B/op)?(?:\s+([0-9.e+]+) allocs/op)?`)

// procSuffix is the "-N" go test appends to a name when GOMAXPROCS is not 1.
var procSuffix = regexp.MustCompile(`-\d+$`)

// loadFeatures reads the features phase's files of a run directory (nil, nil: none).
func loadFeatures(dir string) (*features, error) {
	f, err := os.Open(filepath.Join(dir, "features.out"))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ft, err := parseFeatures(bufio.NewScanner(f))
	if err != nil || ft == nil {
		return ft, err
	}
	cg, err := readTSV(filepath.Join(dir, "features-callgrind.tsv"))
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	if err := ft.addCallgrind(cg); err != nil {
		return nil, err
	}
	ft.compute()
	return ft, nil
}

// parseFeatures reads go test's output: every BenchmarkFeature/<name> line,
// any number of runs of each (-count), in the order first seen; nil when
// there is none (the phase failed or measured nothing).
func parseFeatures(sc *bufio.Scanner) (*features, error) {
	type acc struct{ ns, bytes, allocs []float64 }
	by := map[string]*acc{}
	var order, names []string
	ft := &features{}
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "cpu: "):
			ft.CPU = strings.TrimPrefix(l, "cpu: ")
		case strings.HasPrefix(l, "# benchtime "):
			ft.Benchtime = strings.TrimPrefix(l, "# benchtime ")
		case strings.HasPrefix(l, "# loadavg "):
			ft.Load = append(ft.Load, strings.TrimSpace(strings.TrimPrefix(l, "# loadavg ")))
		case strings.HasPrefix(l, "--- FAIL: BenchmarkFeature/"):
			if f := strings.Fields(strings.TrimPrefix(l, "--- FAIL: BenchmarkFeature/")); len(f) > 0 {
				ft.Failed = append(ft.Failed, f[0])
			}
		}
		m := benchLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		num := func(s string) float64 {
			if s == "" {
				return math.NaN()
			}
			v, _ := strconv.ParseFloat(s, 64)
			return v
		}
		names = append(names, m[1])
		a := by[m[1]]
		if a == nil {
			a = &acc{}
			by[m[1]] = a
			order = append(order, m[1])
		}
		a.ns = append(a.ns, num(m[2]))
		a.bytes = append(a.bytes, num(m[3]))
		a.allocs = append(a.allocs, num(m[4]))
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(order) == 0 {
		if len(ft.Failed) > 0 {
			return ft, nil // every one failed: the doc says which
		}
		return nil, nil
	}
	// "-N" is GOMAXPROCS's only when every name carries the same one
	suffix := procSuffix.FindString(names[0])
	for _, n := range names {
		if suffix == "" || !strings.HasSuffix(n, suffix) || len(n) == len(suffix) {
			suffix = ""
			break
		}
	}
	ft.Procs = 1
	if suffix != "" {
		ft.Procs, _ = strconv.Atoi(strings.TrimPrefix(suffix, "-"))
	}
	for i, n := range ft.Failed {
		ft.Failed[i] = strings.TrimSuffix(n, suffix)
	}
	for _, n := range order {
		a := by[n]
		lo, hi := minMax(a.ns)
		ft.Rows = append(ft.Rows, featureRow{Name: strings.TrimSuffix(n, suffix), Runs: len(a.ns), Ns: median(a.ns), NsLo: lo, NsHi: hi,
			Bytes: median(a.bytes), Allocs: median(a.allocs), Instr: math.NaN()})
		ft.Count = max(ft.Count, len(a.ns))
	}
	return ft, nil
}

// addCallgrind takes the instruction counts of features-callgrind.tsv
// (name, requests of the smaller and larger run, instructions of each):
// per request, the difference of the two runs over the difference of their
// requests, so the test binary's start and end cancel out.
func (ft *features) addCallgrind(t [][]string) error {
	if len(t) < 2 {
		return nil
	}
	col := index(t[0])
	for i, r := range t[1:] {
		var vals [4]float64
		for j, name := range []string{"n1", "ir1", "n2", "ir2"} {
			v, err := strconv.ParseFloat(get(r, col, name), 64)
			if err != nil {
				return fmt.Errorf("features-callgrind.tsv:%d: column %s: %v", i+2, name, err)
			}
			vals[j] = v
		}
		if vals[2] <= vals[0] {
			return fmt.Errorf("features-callgrind.tsv:%d: n2 %v not above n1 %v", i+2, vals[2], vals[0])
		}
		for k := range ft.Rows {
			if ft.Rows[k].Name == get(r, col, "name") {
				ft.Rows[k].Instr = (vals[3] - vals[1]) / (vals[2] - vals[0])
				ft.Callgrind = true
				ft.CGRequests = int(vals[2] - vals[0])
			}
		}
	}
	return nil
}

// Has reports whether a sub-benchmark of that name was measured.
func (ft *features) Has(name string) bool {
	for _, r := range ft.Rows {
		if r.Name == name {
			return true
		}
	}
	return false
}

// compute classifies the rows by name and works out each one's cost
// against "shipped".
func (ft *features) compute() {
	var ref *featureRow
	byName := map[string]*featureRow{}
	for i := range ft.Rows {
		byName[ft.Rows[i].Name] = &ft.Rows[i]
	}
	ref = byName["shipped"]
	ft.Shipped = ref != nil
	for i := range ft.Rows {
		r := &ft.Rows[i]
		r.Feature = r.Name
		switch {
		case r.Name == "shipped":
			r.Kind = "reference"
		case r.Name == "harness-only":
			r.Kind = "harness"
		case strings.HasPrefix(r.Name, "no-"):
			r.Kind, r.Feature = "off", strings.TrimPrefix(r.Name, "no-")
		default:
			r.Kind = "other"
		}
		r.CostNs, r.CostAllocs, r.CostBytes, r.CostInstr = math.NaN(), math.NaN(), math.NaN(), math.NaN()
		if ref == nil || r.Kind == "reference" || r.Kind == "harness" {
			continue
		}
		a, b := r, ref // X − shipped
		if r.Kind == "off" {
			a, b = ref, r // shipped − no-X
		}
		r.CostNs, r.CostAllocs, r.CostBytes, r.CostInstr = a.Ns-b.Ns, a.Allocs-b.Allocs, a.Bytes-b.Bytes, a.Instr-b.Instr
	}
	h, p := byName["harness-only"], byName["plain-reverseproxy"]
	if ref != nil && h != nil && p != nil {
		o := &ownWork{Ns: ref.Ns - h.Ns, PlainNs: p.Ns - h.Ns, Instr: ref.Instr - h.Instr, PlainInstr: p.Instr - h.Instr,
			Allocs: ref.Allocs - h.Allocs, PlainAllocs: p.Allocs - h.Allocs}
		o.Ratio, o.InstrRatio = o.Ns/o.PlainNs, o.Instr/o.PlainInstr
		ft.Own = o
	}
}

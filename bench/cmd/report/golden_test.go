package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files of TestDocGolden from the current output")

// TestDocGolden renders docs/performance.md from fixed results directories
// (testdata/<case>/run, with testdata/<case>/docs as -docs: the previous doc
// whose hand-written sections are carried over) and compares it byte for
// byte with testdata/<case>/performance.md.golden, so a change to the
// template or to what the code computes is reviewed as a diff of the golden
// file. After an intended change: go test ./cmd/report -run TestDocGolden -update
//
//   - full: a real run of bench/run-all.sh (both Redis settings, drain on and
//     off, drainwake, open loop, sweep), plus a cross-check and a previous doc
//     with two hand-written sections.
//     Without nginx-lua (its module absent), fenceproxy-trace-unsampled or
//     the per-feature benchmark: the goals they measure say so.
//   - quirks: a QUICK=1 run at one setting (durable) with edge cases: a peer
//     that answered nothing (no verdict against it), failed functional
//     checks, nothing measured by drainwake, no sweep, phases or previous
//     doc, a per-feature benchmark without "shipped" and without -benchmem.
//   - goals: a real QUICK=1 run with every target (nginx-lua,
//     fenceproxy-trace-unsampled), Redis's commands, the per-feature
//     benchmark with callgrind's instruction counts: most goals not met.
//   - met: a synthetic run at one setting where every goal on CPU and
//     against nginx-lua is met (and fenceproxy refused some requests, so per
//     admitted request differs from per request), the per-feature benchmark
//     at GOMAXPROCS=2 ("-2" names) with a sub-benchmark switched on.
func TestDocGolden(t *testing.T) {
	for _, c := range []struct {
		name  string
		quick string
	}{{"full", ""}, {"quirks", "1"}, {"goals", "1"}, {"met", ""}} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join("testdata", c.name)
			docs := filepath.Join(dir, "docs")
			if _, err := os.Stat(docs); err != nil {
				docs = t.TempDir() // no previous doc, no sweep data there
			}
			out := filepath.Join(t.TempDir(), "performance.md")
			if err := docCmd([]string{"-run", filepath.Join(dir, "run"), "-docs", docs, "-out", out, "-quick", c.quick}); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join(dir, "performance.md.golden")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("the doc differs from %s (if intended, rerun with -update and review the diff):\n%s", golden, firstDiff(want, got))
			}
		})
	}
}

// firstDiff shows the first line where got departs from want, with its neighbours.
func firstDiff(want, got []byte) string {
	wl, gl := bytes.Split(want, []byte("\n")), bytes.Split(got, []byte("\n"))
	for i := 0; i < max(len(wl), len(gl)); i++ {
		var w, g []byte
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if !bytes.Equal(w, g) || i >= len(wl) || i >= len(gl) {
			var b bytes.Buffer
			for j := max(0, i-2); j < i; j++ {
				b.WriteString("  " + string(wl[j]) + "\n")
			}
			b.WriteString("- " + string(w) + "\n+ " + string(g) + "\n")
			fmt.Fprintf(&b, "(line %d)", i+1)
			return b.String()
		}
	}
	return "(no line differs)"
}

// render is the doc of d, for the tests that look for phrases in it.
func (d *runData) render() string {
	var b strings.Builder
	if err := d.write(&b); err != nil {
		panic(err)
	}
	return b.String()
}

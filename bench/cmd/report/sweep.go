package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
)

// sweepCmd reduces the rows of bench/sweep.sh to one line per target and
// connection count (medians over the rounds): the data file the plot is
// drawn from, committed as docs/performance-data.tsv.
func sweepCmd(args []string) error {
	fs := flag.NewFlagSet("sweep", flag.ExitOnError)
	in := fs.String("in", "", "rows of bench/sweep.sh")
	out := fs.String("out", "", "data file to write")
	_ = fs.Parse(args)
	rows, err := readRows(*in)
	if err != nil {
		return err
	}
	var conns []int
	for _, r := range rows {
		if !slices.Contains(conns, r.conns) {
			conns = append(conns, r.conns)
		}
	}
	slices.Sort(conns)
	var b strings.Builder
	b.WriteString("# throughput and p99 against client connections: medians over interleaved rounds of wrk\n")
	b.WriteString("# (closed loop, PUT /r/k0..k999, 20-byte bodies, Redis without persistence); written by bench/sweep.sh\n")
	b.WriteString("target\tconns\trounds\trps\tp50_ms\tp99_ms\tnon2xx\tproxy_cpu_us_per_req\n")
	for _, t := range targetsIn(rows) {
		for _, c := range conns {
			s := summarize(rows, t, c, 0)
			if s.rounds == 0 {
				continue
			}
			fmt.Fprintf(&b, "%s\t%d\t%d\t%.0f\t%.3f\t%.3f\t%d\t%.0f\n", t, c, s.rounds, s.rps, s.p50/1000, s.p99/1000, s.non2xx+s.sockerr, s.usProxy)
		}
	}
	if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
		return err
	}
	fmt.Fprint(os.Stderr, b.String())
	return nil
}

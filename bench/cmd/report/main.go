// Command report turns the raw rows of bench/compare.sh and bench/sweep.sh
// into medians, ratios and summary lines, and writes docs/performance.md from
// one run of bench/run-all.sh.
//
//	report compare -in compare-none.tsv -setting none -stale ok [-lua-check ok]
//	report sweep -in sweep.tsv -out docs/performance-data.tsv
//	report doc -run DIR -out docs/performance.md
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: report compare|sweep|doc [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "compare":
		err = compareCmd(os.Args[2:])
	case "sweep":
		err = sweepCmd(os.Args[2:])
	case "doc":
		err = docCmd(os.Args[2:])
	default:
		err = fmt.Errorf("unknown subcommand %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

// compareOrder is the order targets are shown in.
var compareOrder = []string{"fenceproxy", "go-plain", "nginx", "nginx-lua"}

func compareCmd(args []string) error {
	fs := flag.NewFlagSet("compare", flag.ExitOnError)
	in := fs.String("in", "", "results TSV of one compare run at one Redis setting")
	setting := fs.String("setting", "", "Redis setting label (none or durable)")
	stale := fs.String("stale", "?", "result of the fenceproxy functional check")
	luaCheck := fs.String("lua-check", "", "result of the nginx-lua functional check (empty: not run)")
	ncpu := fs.Int("ncpu", runtime.NumCPU(), "CPUs of the machine")
	_ = fs.Parse(args)
	rows, err := readRows(*in)
	if err != nil {
		return err
	}
	var mine []row
	for _, r := range rows {
		if r.setting == *setting {
			mine = append(mine, r)
		}
	}
	if len(mine) == 0 {
		return fmt.Errorf("%s: no rows for setting %q", *in, *setting)
	}
	conns := mine[0].conns
	st := map[string]stats{}
	for _, t := range targetsIn(mine) {
		st[t] = summarize(mine, t, conns, float64(*ncpu))
	}
	printCompareTable(os.Stderr, *setting, st)
	fmt.Println(compareLine(*setting, mine, st, conns, *stale, *luaCheck))
	return nil
}

func printCompareTable(w *os.File, setting string, st map[string]stats) {
	fmt.Fprintf(w, "medians, Redis %s:\n", settingName(setting))
	fmt.Fprintf(w, "  %-10s %6s %8s %17s %8s %8s %7s %7s %10s %9s %8s\n",
		"target", "rounds", "req/s", "(min-max)", "p50 ms", "p99 ms", "non2xx", "sockerr", "proxy us/r", "redis us/r", "other cpu")
	for _, t := range compareOrder {
		s, ok := st[t]
		if !ok {
			continue
		}
		fmt.Fprintf(w, "  %-10s %6d %8.0f %8.0f-%-8.0f %8.2f %8.2f %7d %7d %10.0f %9.0f %8.2f\n",
			t, s.rounds, s.rps, s.rpsMin, s.rpsMax, s.p50/1000, s.p99/1000, s.non2xx, s.sockerr,
			s.usProxy, s.usRedis, s.other)
	}
}

func settingName(s string) string {
	switch s {
	case "none":
		return "without persistence"
	case "durable":
		return "appendonly yes, appendfsync always"
	}
	return s
}

func ratio(a, b float64) string {
	if b <= 0 || math.IsNaN(a) || math.IsNaN(b) {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// compareLine is the one summary line of a compare run at one setting.
func compareLine(setting string, rows []row, st map[string]stats, conns int, stale, luaCheck string) string {
	var b strings.Builder
	fp := st["fenceproxy"]
	fmt.Fprintf(&b, "compare[redis=%s]:", setting)
	for _, t := range compareOrder {
		if s, ok := st[t]; ok {
			fmt.Fprintf(&b, " %s=%.0frps/p99=%.2fms", t, s.rps, s.p99/1000)
		}
	}
	b.WriteString(" |")
	for _, t := range compareOrder[1:] {
		if s, ok := st[t]; ok {
			fmt.Fprintf(&b, " thr/%s=%s", t, ratio(fp.rps, s.rps))
		}
	}
	if rr := roundRatios(rows, "fenceproxy", "go-plain", conns); len(rr) > 1 {
		fmt.Fprintf(&b, " (rounds %.2f-%.2f)", rr[0], rr[len(rr)-1])
	}
	var deltas []string
	for _, t := range compareOrder[1:] {
		if s, ok := st[t]; ok {
			deltas = append(deltas, fmt.Sprintf("%+.2fms vs %s", (fp.p99-s.p99)/1000, t))
		}
	}
	b.WriteString(" | p99 " + strings.Join(deltas, ", "))
	b.WriteString(" | cpu_us/req")
	for _, t := range compareOrder {
		if s, ok := st[t]; ok {
			fmt.Fprintf(&b, " %s=%.0f", t, s.usProxy)
			if s.usRedis > 0.5 {
				fmt.Fprintf(&b, "(+redis %.0f)", s.usRedis)
			}
		}
	}
	fmt.Fprintf(&b, " | non2xx=%d sockerr=%d", fp.non2xx, fp.sockerr)
	if nl, ok := st["nginx-lua"]; ok && nl.non2xx+nl.sockerr > 0 {
		fmt.Fprintf(&b, " nginx-lua-non2xx=%d", nl.non2xx+nl.sockerr)
	}
	if luaCheck != "" {
		fmt.Fprintf(&b, " lua-check=%s", luaCheck)
	}
	fmt.Fprintf(&b, " stale-check=%s", stale)
	return b.String()
}

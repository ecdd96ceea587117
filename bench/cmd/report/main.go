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

// compareOrder is the order targets are shown in. fenceproxy runs with the
// drain barrier on (the default); fenceproxy-nodrain is the same binary
// with FENCE_DRAIN=off.
// fenceproxy-trace-unsampled is the same binary with tracing wired and
// nothing sampled.
var compareOrder = []string{"fenceproxy", "go-plain", "nginx", "nginx-lua", "fenceproxy-nodrain", traced}

// peers are the targets that are not fenceproxy: fenceproxy's throughput
// ratio to each is reported as thr/<peer>.
var peers = []string{"go-plain", "nginx", "nginx-lua"}

const nodrain = "fenceproxy-nodrain"

func compareCmd(args []string) error {
	fs := flag.NewFlagSet("compare", flag.ExitOnError)
	in := fs.String("in", "", "results TSV of one compare run at one Redis setting")
	setting := fs.String("setting", "", "Redis setting label (none or durable)")
	stale := fs.String("stale", "?", "result of the fenceproxy functional check")
	luaCheck := fs.String("lua-check", "", "result of the nginx-lua functional check (empty: not run)")
	nodrainCheck := fs.String("nodrain-check", "", "result of the fenceproxy-nodrain functional check (empty: not run)")
	traceCheck := fs.String("trace-check", "", "result of the fenceproxy-trace-unsampled functional check (empty: not run)")
	redisIn := fs.String("redis", "", "Redis commands per run (compare-SETTING-redis.tsv; optional)")
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
	var cmds []cmdRow
	if *redisIn != "" {
		if cmds, err = readCmdRows(*redisIn); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	conns := mine[0].conns
	st := map[string]stats{}
	for _, t := range targetsIn(mine) {
		st[t] = summarize(mine, t, conns, float64(*ncpu))
	}
	printCompareTable(os.Stderr, *setting, st, cmds)
	fmt.Println(compareLine(*setting, mine, st, conns, checks{stale: *stale, lua: *luaCheck, nodrain: *nodrainCheck, trace: *traceCheck}, cmds))
	return nil
}

// goalFor is the throughput goal fenceproxy/go-plain at a Redis setting (NaN: none).
func goalFor(setting string) float64 {
	switch setting {
	case "none":
		return goalThrNone
	case "durable":
		return goalThrDurable
	}
	return math.NaN()
}

// goalWord is "met", "MISSED" or "-" (no goal, or no ratio).
func goalWord(r, goal float64) string {
	switch {
	case math.IsNaN(r) || math.IsNaN(goal) || math.IsInf(r, 0):
		return "-"
	case r >= goal:
		return "met"
	}
	return "MISSED"
}

// ceilingWord is "met" when r is at most goal (below it when strict),
// "MISSED" above, "-" when either is unknown.
func ceilingWord(r, goal float64, strict bool) string {
	switch {
	case math.IsNaN(r) || math.IsNaN(goal) || math.IsInf(r, 0):
		return "-"
	case r < goal, r == goal && !strict:
		return "met"
	}
	return "MISSED"
}

// checks are the functional checks' results before a compare run ("": not run).
type checks struct{ stale, lua, nodrain, trace string }

// rpsRatio is a's median throughput over b's, NaN when either is missing.
func rpsRatio(st map[string]stats, a, b string) float64 {
	x, ok1 := st[a]
	y, ok2 := st[b]
	if !ok1 || !ok2 || y.rps <= 0 {
		return math.NaN()
	}
	return x.rps / y.rps
}

// roundSpan is " (rounds lo-hi)" for the round-by-round ratios of a to b
// when there are at least two, else "".
func roundSpan(rows []row, a, b string, conns int) string {
	rr := roundRatios(rows, a, b, conns)
	if len(rr) < 2 {
		return ""
	}
	return fmt.Sprintf(" (rounds %.2f-%.2f)", rr[0], rr[len(rr)-1])
}

func printCompareTable(w *os.File, setting string, st map[string]stats, cmds []cmdRow) {
	fmt.Fprintf(w, "medians, Redis %s:\n", settingName(setting))
	fmt.Fprintf(w, "  %-18s %6s %8s %17s %8s %8s %7s %7s %10s %9s %8s\n",
		"target", "rounds", "req/s", "(min-max)", "p50 ms", "p99 ms", "non2xx", "sockerr", "proxy us/r", "redis us/r", "other cpu")
	for _, t := range compareOrder {
		s, ok := st[t]
		if !ok {
			continue
		}
		fmt.Fprintf(w, "  %-18s %6d %8.0f %8.0f-%-8.0f %8.2f %8.2f %7d %7d %10.0f %9.0f %8.2f\n",
			t, s.rounds, s.rps, s.rpsMin, s.rpsMax, s.p50/1000, s.p99/1000, s.non2xx, s.sockerr,
			s.usProxy, s.usRedis, s.other)
	}
	for _, t := range compareOrder {
		if cs := commandsPerRequest(cmds, setting, t); len(cs) > 0 {
			fmt.Fprintf(w, "  Redis per request, %s: %s\n", t, formatCommands(cs, ", "))
		}
	}
	for _, t := range compareOrder {
		if s, ok := st[t]; ok && len(s.decisions) > 0 {
			fmt.Fprintf(w, "  decisions, %s: %s\n", t, strings.Join(s.decisions, " | "))
		}
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
func compareLine(key string, rows []row, st map[string]stats, conns int, ck checks, cmds []cmdRow) string {
	var b strings.Builder
	fp := st["fenceproxy"]
	fmt.Fprintf(&b, "compare[redis=%s]:", key)
	for _, t := range compareOrder {
		if s, ok := st[t]; ok {
			fmt.Fprintf(&b, " %s=%.0frps/p99=%.2fms", t, s.rps, s.p99/1000)
		}
	}
	b.WriteString(" |")
	for _, t := range peers {
		if s, ok := st[t]; ok {
			fmt.Fprintf(&b, " thr/%s=%s", t, ratio(fp.rps, s.rps))
		}
	}
	b.WriteString(roundSpan(rows, "fenceproxy", "go-plain", conns))
	if goal := goalFor(key); !math.IsNaN(goal) {
		fmt.Fprintf(&b, " goal>=%.2f:%s", goal, goalWord(rpsRatio(st, "fenceproxy", "go-plain"), goal))
	}
	if nd, ok := st[nodrain]; ok {
		if gp, ok := st["go-plain"]; ok {
			fmt.Fprintf(&b, " | nodrain/go-plain=%s%s", ratio(nd.rps, gp.rps), roundSpan(rows, nodrain, "go-plain", conns))
		}
		fmt.Fprintf(&b, " | drain-on/off=%s%s goal>=%.2f:%s", ratio(fp.rps, nd.rps), roundSpan(rows, "fenceproxy", nodrain, conns),
			goalDrainOnOff, goalWord(rpsRatio(st, "fenceproxy", nodrain), goalDrainOnOff))
	}
	// the CPU goals (per admitted request), and the peer doing the same fencing
	v := &setting{NL: &targetView{}}
	if s, ok := st["nginx-lua"]; ok {
		v.NL = &targetView{Measured: true, RPS: s.rps, Ratio: fp.rps / s.rps}
	}
	v.cpuGoals(st, rows, conns)
	for _, g := range []struct {
		name string
		g    cpuGoal
	}{{"cpu/go-plain", v.CPU}, {"redis-cpu-on/off", v.RedisOnOff}, {"cpu-trace-unsampled/off", v.Trace}} {
		if g.g.Known {
			fmt.Fprintf(&b, " | %s=%.2f goal<=%.2f:%s", g.name, g.g.Ratio, g.g.Goal, ceilingWord(g.g.Ratio, g.g.Goal, false))
		}
	}
	if v.NL.Measured && !v.LuaDead {
		fmt.Fprintf(&b, " | beat-nginx-lua thr=%.2f:%s", v.NL.Ratio, map[bool]string{true: "met", false: "MISSED"}[v.LuaThrMet])
		if v.LuaCPU.Known {
			fmt.Fprintf(&b, " cpu+redis=%.2f:%s", v.LuaCPU.Ratio, ceilingWord(v.LuaCPU.Ratio, v.LuaCPU.Goal, true))
		}
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
	var rc, tc []string
	for _, t := range []string{"fenceproxy", nodrain} {
		cs := commandsPerRequest(cmds, key, t)
		if len(cs) == 0 {
			continue
		}
		var parts []string
		for _, c := range cs {
			if c.callsPerReq >= 0.001 {
				parts = append(parts, fmt.Sprintf("%s:%.3f", c.command, c.callsPerReq))
			}
		}
		rc = append(rc, t+"="+strings.Join(parts, ","))
		tc = append(tc, fmt.Sprintf("%s=%.2f(scripts %.3f)", t, totalCalls(cs), scriptRuns(cs)))
	}
	if len(rc) > 0 {
		b.WriteString(" | redis_calls/req " + strings.Join(rc, " "))
		b.WriteString(" | commands/req " + strings.Join(tc, " "))
	}
	fmt.Fprintf(&b, " | non2xx=%d sockerr=%d", fp.non2xx, fp.sockerr)
	if nd, ok := st[nodrain]; ok {
		fmt.Fprintf(&b, " nodrain-non2xx=%d", nd.non2xx+nd.sockerr)
	}
	if nl, ok := st["nginx-lua"]; ok && nl.non2xx+nl.sockerr > 0 {
		fmt.Fprintf(&b, " nginx-lua-non2xx=%d", nl.non2xx+nl.sockerr)
	}
	if tr, ok := st[traced]; ok {
		fmt.Fprintf(&b, " trace-non2xx=%d", tr.non2xx+tr.sockerr)
	}
	if ck.lua != "" {
		fmt.Fprintf(&b, " lua-check=%s", ck.lua)
	}
	if ck.trace != "" {
		fmt.Fprintf(&b, " trace-check=%s", ck.trace)
	}
	// nodrain-check last before stale-check: readers of the line rely on that
	if ck.nodrain != "" {
		fmt.Fprintf(&b, " nodrain-check=%s", ck.nodrain)
	}
	fmt.Fprintf(&b, " stale-check=%s", ck.stale)
	return b.String()
}

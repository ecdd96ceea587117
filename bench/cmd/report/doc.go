package main

import (
	"bufio"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The goals, as ratios or deltas measured in one run.
const (
	goalThrNone    = 0.95 // fenceproxy / go-plain, Redis without persistence
	goalThrDurable = 0.75 // fenceproxy / go-plain, appendfsync always
	goalAddedP99ms = 1.0  // open loop: fenceproxy p99 - go-plain p99
	goalDrainOnOff = 0.9  // fenceproxy (drain barrier on) / fenceproxy-nodrain (FENCE_DRAIN=off)
	goalDrainWake  = 5.0  // ms: median wait of a newer generation after the older request completed
)

// docCmd writes docs/performance.md from the files one bench/run-all.sh run
// left in its results directory: machine.tsv, phases.tsv, compare-*.tsv,
// compare.out, openloop.tsv, openloop.out, the sweep data file and, when
// present, crosscheck.txt (summary lines of an independent harness, pasted).
// The hand-written sections of the doc it replaces (-docs/performance.md:
// each a "## " section whose text starts with "Hand-written") are carried
// over, in their order, after the generated ones: they report runs of other
// scripts (bench/signed.sh, stores.sh, authz.sh) that run-all.sh does not make.
func docCmd(args []string) error {
	fs := flag.NewFlagSet("doc", flag.ExitOnError)
	run := fs.String("run", "", "results directory of one bench/run-all.sh run")
	docs := fs.String("docs", "docs", "where performance-data.tsv is when the run directory has no copy")
	out := fs.String("out", "docs/performance.md", "markdown file to write")
	quick := fs.String("quick", "", "set when the run was QUICK=1 (the doc says so)")
	_ = fs.Parse(args)
	d, err := loadRun(*run, *docs)
	if err != nil {
		return err
	}
	d.quick = *quick == "1"
	prev := filepath.Join(*docs, "performance.md")
	if b, err := os.ReadFile(prev); err == nil {
		d.kept = handWritten(string(b))
		fmt.Fprintf(os.Stderr, "report: %d hand-written section(s) of %s carried over\n", len(d.kept), prev)
	} else {
		fmt.Fprintf(os.Stderr, "report: no %s (%v): no hand-written sections carried over\n", prev, err)
	}
	md := d.render()
	if err := os.WriteFile(*out, []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "report: wrote %s\n", *out)
	return nil
}

type runData struct {
	dir, docs  string
	quick      bool
	machine    map[string]string
	phases     [][2]string
	settings   []string         // compare settings present, in order
	compare    map[string][]row // by setting
	lines      map[string]string
	openloop   []olRow
	olLines    []string
	sweep      [][]string // data file rows, header first
	crosscheck string
	kept       []string // hand-written sections of the previous doc, carried over (handWritten)
	ncpu       float64
	cmds       map[string][]cmdRow // Redis commands per run, by setting
	wake       []wakeRow           // bench/cmd/drainwake, drainwake.tsv
	wakeLines  []string
}

// wakeRow is one target's row of bench/cmd/drainwake.
type wakeRow struct {
	label, target               string
	n, measured                 int
	hold, gap                   float64 // ms
	p50, p90, p99, max, lone    float64 // microseconds; NaN when nothing was measured
	overtook, reordered, errors int
	overlapped                  int // -1: not measured (a run before the origin could tell)
}

type olRow struct {
	label, mode, target, segments    string
	rate, seconds                    float64
	n                                int
	p50, p90, p99, p999, max, lagP99 float64 // microseconds
	non2xx, errors                   int
	roundP99                         []float64
}

func loadRun(dir, docs string) (*runData, error) {
	d := &runData{dir: dir, docs: docs, machine: map[string]string{}, compare: map[string][]row{}, lines: map[string]string{},
		cmds: map[string][]cmdRow{}}
	kv, err := readTSV(filepath.Join(dir, "machine.tsv"))
	if err != nil {
		return nil, err
	}
	for _, r := range kv {
		if len(r) == 2 {
			d.machine[r[0]] = r[1]
		}
	}
	d.ncpu, _ = strconv.ParseFloat(d.machine["nproc"], 64)
	if ph, err := readTSV(filepath.Join(dir, "phases.tsv")); err == nil {
		for _, r := range ph[1:] {
			if len(r) == 2 {
				d.phases = append(d.phases, [2]string{r[0], r[1]})
			}
		}
	}
	for _, s := range []string{"none", "durable"} {
		rows, err := readRows(filepath.Join(dir, "compare-"+s+".tsv"))
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			return nil, err
		}
		d.settings = append(d.settings, s)
		d.compare[s] = rows
		cmds, err := readCmdRows(filepath.Join(dir, "compare-"+s+"-redis.tsv"))
		if err != nil && !os.IsNotExist(err) {
			return nil, err
		}
		d.cmds[s] = cmds
	}
	if len(d.settings) == 0 {
		return nil, fmt.Errorf("%s: no compare-*.tsv", dir)
	}
	for _, l := range lines(filepath.Join(dir, "compare.out")) {
		if strings.HasPrefix(l, "compare[redis=") {
			s := strings.TrimPrefix(l, "compare[redis=")
			s = s[:strings.IndexByte(s, ']')]
			d.lines[s] = l
		}
		if strings.HasPrefix(l, "drain-wake[") {
			d.wakeLines = append(d.wakeLines, l)
		}
	}
	if wk, err := readTSV(filepath.Join(dir, "drainwake.tsv")); err == nil && len(wk) > 1 {
		col := index(wk[0])
		for _, r := range wk[1:] {
			f := func(name string) float64 {
				v, err := strconv.ParseFloat(get(r, col, name), 64)
				if err != nil {
					return math.NaN()
				}
				return v
			}
			i := func(name string) int {
				v, err := strconv.Atoi(get(r, col, name))
				if err != nil {
					return -1
				}
				return v
			}
			d.wake = append(d.wake, wakeRow{label: get(r, col, "label"), target: get(r, col, "target"), n: i("n"), measured: i("measured"),
				hold: f("hold_ms"), gap: f("gap_ms"), p50: f("after_older_p50_us"), p90: f("after_older_p90_us"), p99: f("after_older_p99_us"),
				max: f("after_older_max_us"), lone: f("lone_p50_us"), overtook: i("overtook"), reordered: i("reordered"), errors: i("errors"),
				overlapped: i("overlapped")})
		}
	}
	for _, l := range lines(filepath.Join(dir, "openloop.out")) {
		if strings.HasPrefix(l, "openloop[") {
			d.olLines = append(d.olLines, l)
		}
	}
	if ol, err := readTSV(filepath.Join(dir, "openloop.tsv")); err == nil && len(ol) > 1 {
		col := index(ol[0])
		for _, r := range ol[1:] {
			f := func(name string) float64 { v, _ := strconv.ParseFloat(get(r, col, name), 64); return v }
			o := olRow{label: get(r, col, "label"), mode: get(r, col, "mode"), target: get(r, col, "target"), segments: get(r, col, "segments"), rate: f("rate"), seconds: f("seconds"),
				n: int(f("requests")), p50: f("p50_us"), p90: f("p90_us"), p99: f("p99_us"), p999: f("p999_us"), max: f("max_us"),
				lagP99: f("send_lag_p99_us"), non2xx: int(f("non2xx")), errors: int(f("errors"))}
			for _, s := range strings.Split(get(r, col, "round_p99_us"), ",") {
				if v, err := strconv.ParseFloat(s, 64); err == nil {
					o.roundP99 = append(o.roundP99, v)
				}
			}
			d.openloop = append(d.openloop, o)
		}
	}
	// the run's own copy of the sweep data first (run-all.sh keeps one), else the docs directory's
	for _, dir := range []string{dir, docs} {
		if sw, err := readTSV(filepath.Join(dir, "performance-data.tsv")); err == nil {
			d.sweep = sw
			break
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "crosscheck.txt")); err == nil {
		d.crosscheck = strings.TrimSpace(string(b))
	}
	return d, nil
}

// readTSV reads tab-separated lines, skipping '#' comments and blank lines.
func readTSV(path string) ([][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		out = append(out, strings.Split(l, "\t"))
	}
	return out, sc.Err()
}

func lines(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func index(header []string) map[string]int {
	m := map[string]int{}
	for i, h := range header {
		m[h] = i
	}
	return m
}

func get(r []string, col map[string]int, name string) string {
	i, ok := col[name]
	if !ok || i >= len(r) {
		return ""
	}
	return r[i]
}

func verdict(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**not met**"
}

func f0(x float64) string {
	if math.IsNaN(x) {
		return "-"
	}
	return strconv.FormatFloat(math.Round(x), 'f', 0, 64)
}

func thousands(x float64) string {
	if math.IsNaN(x) {
		return "-"
	}
	s := strconv.FormatInt(int64(math.Round(x)), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func (d *runData) stats(setting string) (map[string]stats, int) {
	rows := d.compare[setting]
	conns := rows[0].conns
	st := map[string]stats{}
	for _, t := range targetsIn(rows) {
		st[t] = summarize(rows, t, conns, d.ncpu)
	}
	return st, conns
}

func (d *runData) olFor(label, mode, target string) (olRow, bool) {
	for _, o := range d.openloop {
		if o.label == label && o.mode == mode && o.target == target {
			return o, true
		}
	}
	return olRow{}, false
}

func (d *runData) render() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	m := d.machine

	p("# Performance\n\n")
	p("Generated by `bench/run-all.sh` (`bench/cmd/report doc`) from **one run** on %s, commit `%s`.", m["date"], m["commit"])
	if d.quick {
		p(" **This was a QUICK=1 smoke run: one short round per target; its numbers are not a result.**")
	}
	if len(d.kept) > 0 {
		p(" Every number below comes from that run, except in the hand-written sections at the end, carried over\n")
		p("from the previous version of this file, each of which says how and when it was measured;")
	} else {
		p(" Every number below comes from that run;")
	}
	p(" the figures are ratios and differences of targets measured\n")
	p("side by side, interleaved round by round, on a shared virtual machine where absolute numbers drift\n")
	p("from minute to minute. Regenerate it with `make bench` (see [How to reproduce](#how-to-reproduce)).\n\n")
	p("**fenceproxy** in every table is fenceproxy as shipped: the drain barrier on (`FENCE_DRAIN=on`, the default),\n")
	p("so every admission also registers its request as in flight and every completed request sends a release.\n")
	if d.hasNodrain() {
		p("**fenceproxy-nodrain** is the same binary with `FENCE_DRAIN=off`, measured in the same interleaved rounds,\n")
		p("so *drain on ÷ off* is what the barrier costs.\n")
	}
	p("\n")

	// ---- summary
	p("## Summary\n\n")
	for _, s := range d.settings {
		st, _ := d.stats(s)
		fp, gp := st["fenceproxy"], st["go-plain"]
		r := fp.rps / gp.rps
		goal := goalThrNone
		if s == "durable" {
			goal = goalThrDurable
		}
		p("- Throughput, Redis %s: fenceproxy (drain barrier on) does **%.2f×** go-plain (goal ≥ %.2f: %s)", settingName(s), r, goal, verdict(r >= goal))
		if ng, ok := st["nginx"]; ok {
			p(", %.2f× nginx", fp.rps/ng.rps)
		}
		if nl, ok := st["nginx-lua"]; ok {
			p(", **%.2f× nginx+Lua** (the peer doing the same fencing)", fp.rps/nl.rps)
		}
		rr := roundRatios(d.compare[s], "fenceproxy", "go-plain", fp.conns)
		if len(rr) > 1 {
			p("; round by round %.2f-%.2f× go-plain", rr[0], rr[len(rr)-1])
		}
		p(". CPU per request: fenceproxy %.0f µs (+%.0f µs in Redis), go-plain %.0f µs", fp.usProxy, fp.usRedis, gp.usProxy)
		if nl, ok := st["nginx-lua"]; ok {
			p(", nginx+Lua %.0f µs (+%.0f µs in Redis)", nl.usProxy, nl.usRedis)
		}
		p(".\n")
	}
	for _, s := range d.settings {
		st, _ := d.stats(s)
		fp, gp := st["fenceproxy"], st["go-plain"]
		nd, ok := st[nodrain]
		if !ok {
			continue
		}
		r := fp.rps / nd.rps
		p("- Drain barrier on ÷ off, Redis %s: **%.2f** (goal ≥ %.2f: %s)", settingName(s), r, goalDrainOnOff, verdict(r >= goalDrainOnOff))
		if rr := roundRatios(d.compare[s], "fenceproxy", nodrain, fp.conns); len(rr) > 1 {
			p(", round by round %.2f-%.2f", rr[0], rr[len(rr)-1])
		}
		p("; fenceproxy-nodrain does %.2f× go-plain", nd.rps/gp.rps)
		p(". CPU per request on vs off: fenceproxy %.0f vs %.0f µs, Redis %.0f vs %.0f µs", fp.usProxy, nd.usProxy, fp.usRedis, nd.usRedis)
		con, coff := commandsPerRequest(d.cmds[s], s, "fenceproxy"), commandsPerRequest(d.cmds[s], s, nodrain)
		if len(con) > 0 && len(coff) > 0 {
			p("; Redis script runs per request %.3f vs %.3f", scriptRuns(con), scriptRuns(coff))
		}
		p(" (see [the drain barrier: on against off](#the-drain-barrier-on-against-off)).\n")
	}
	if w := d.wakeFor("fenceproxy"); len(w) > 0 {
		var parts []string
		for _, x := range w {
			if x.measured == 0 {
				parts = append(parts, fmt.Sprintf("Redis %s: nothing measured (%d overtook, %d reordered, %d errors)", settingName(strings.TrimPrefix(x.label, "redis=")), x.overtook, x.reordered, x.errors))
				continue
			}
			parts = append(parts, fmt.Sprintf("Redis %s: median **%.2f ms**, p99 %.2f ms (goal median < %.0f ms: %s)",
				settingName(strings.TrimPrefix(x.label, "redis=")), x.p50/1000, x.p99/1000, goalDrainWake, verdict(x.p50/1000 < goalDrainWake)))
		}
		p("- Wait of a newer generation after the older request completed (barrier on; `bench/cmd/drainwake`, the newer\n")
		p("  answer's end minus the older answer's end, from the client, so an upper bound): %s.", strings.Join(parts, "; "))
		var on []string
		for _, x := range w {
			if x.overlapped >= 0 {
				on = append(on, fmt.Sprintf("%d of %d", x.overlapped, x.n))
			}
		}
		if len(on) > 0 {
			p(" With the barrier on, the newer request reached the origin while it still held the older one in %s pairs", strings.Join(on, " and "))
		}
		if off := d.wakeFor(nodrain); len(off) > 0 {
			var o []string
			for _, x := range off {
				if x.overlapped >= 0 {
					o = append(o, fmt.Sprintf("%d of %d", x.overlapped, x.n))
				} else {
					o = append(o, fmt.Sprintf("%d of %d", x.overtook, x.n))
				}
			}
			what := "the newer request's answer came before the older one's"
			if off[0].overlapped >= 0 {
				what = "the newer request reached the origin while it still held the older one"
			}
			if len(on) > 0 {
				p("; with it off, in %s.", strings.Join(o, " and "))
			} else {
				p(" With the barrier off, %s in %s pairs.", what, strings.Join(o, " and "))
			}
		} else if len(on) > 0 {
			p(".")
		}
		p("\n")
	}
	for _, s := range d.settings {
		var parts []string
		for _, mode := range olModes {
			fp, ok1 := d.olFor("redis="+s, mode, "fenceproxy")
			gp, ok2 := d.olFor("redis="+s, mode, "go-plain")
			if !ok1 || !ok2 || fp.n == 0 || gp.n == 0 {
				continue
			}
			added := (fp.p99 - gp.p99) / 1000
			parts = append(parts, fmt.Sprintf("%s **%+.2f ms** (%.2f vs %.2f ms%s; %s)", modeName(mode), added, fp.p99/1000, gp.p99/1000,
				segNote(fp), olVerdict(fp, gp)))
		}
		if len(parts) > 0 {
			o, _ := d.olFor("redis="+s, "interleaved", "fenceproxy")
			p("- Latency at a fixed %.0f req/s (open loop), Redis %s, fenceproxy's p99 minus go-plain's (goal ≤ +%.0f ms): %s.\n",
				o.rate, settingName(s), goalAddedP99ms, strings.Join(parts, "; "))
		}
	}
	var bad int64
	checks := "ok"
	for _, s := range d.settings {
		st, _ := d.stats(s)
		bad += st["fenceproxy"].non2xx + st["fenceproxy"].sockerr
		if l := d.lines[s]; l != "" && (!strings.HasSuffix(l, "stale-check=ok") ||
			(strings.Contains(l, " nodrain-check=") && !strings.Contains(l, " nodrain-check=ok "))) {
			checks = "FAILED (see the summary lines)"
		}
	}
	var others []float64
	for _, s := range d.settings {
		for _, r := range d.compare[s] {
			others = append(others, math.Max(0, d.ncpu-r.cpuProxy-r.cpuOrigin-r.cpuRedis-r.cpuWrk-r.cpuIdle-r.cpuSteal))
		}
	}
	var lagMax float64
	for _, o := range d.openloop {
		lagMax = math.Max(lagMax, o.lagP99)
	}
	if len(others) > 0 {
		lo, hi := minMax(others)
		p("- Noise: during the throughput runs, processes this benchmark did not start (and the kernel's network\n")
		p("  work) kept %.2f of the %.0f vCPUs busy on average (%.2f-%.2f per run)", mean(others), d.ncpu, lo, hi)
		if lagMax > 0 {
			p("; in the open-loop runs the load generator itself\n  was up to %.1f ms late at p99 in sending (its *send lag*), so p99 latencies there are mostly the machine's", lagMax/1000)
		}
		p(".\n")
	}
	p("- fenceproxy answered non-2xx or failed %d times under load", bad)
	if d.hasNodrain() {
		var nbad int64
		for _, s := range d.settings {
			st, _ := d.stats(s)
			nbad += st[nodrain].non2xx + st[nodrain].sockerr
		}
		p(" (fenceproxy-nodrain %d times)", nbad)
	}
	p("; the functional checks before measuring (fresh token admitted, older refused, exact past 2^53, the mark in Redis): %s.\n", checks)
	if st, ok := d.compare["none"]; ok && len(st) > 0 {
		s, _ := d.stats("none")
		fp := s["fenceproxy"]
		p("- Per core: one core of fenceproxy CPU serves about **%s requests/s** (%.0f µs of proxy CPU per request; %.0f µs more in Redis), see [what to expect per core](#what-to-expect-per-core).\n",
			thousands(1e6/fp.usProxy), fp.usProxy, fp.usRedis)
	}
	p("\n")

	// ---- machine
	p("## Machine and versions\n\n")
	p("| | |\n| --- | --- |\n")
	for _, k := range [][2]string{{"cpu", "CPU"}, {"nproc", "vCPUs (nproc)"}, {"mem", "memory"}, {"kernel", "kernel"}, {"go", "Go"},
		{"redis", "Redis"}, {"nginx", "nginx"}, {"nginx_lua", "libnginx-mod-http-lua"}, {"wrk", "wrk"}, {"fs", "filesystem of Redis's data (AOF)"}, {"fsync", "synchronous write latency there"},
		{"loadavg", "load average at the start"}, {"commit", "fenceproxy commit"}, {"binary", "fenceproxy binary measured"}} {
		p("| %s | %s |\n", k[1], strings.ReplaceAll(m[k[0]], "|", "/"))
	}
	p("\nA virtual machine shared with other engineers' test runs; everything on loopback (127.0.0.1). The CPU\n")
	p("columns below include \"other\": the cores in use by processes this benchmark did not start, a\n")
	p("measure of how noisy the neighbours were during each run.\n\n")

	// ---- what ran
	p("## What was measured\n\n")
	p("Components, all started by the scripts, each in its own session, stopped by PID:\n\n")
	p("- **origin** (`bench/cmd/origin`): Go `net/http`, drains the body, answers 200 with a 20-byte body.\n")
	p("- **go-plain** (`bench/cmd/goplain`): `httputil.ReverseProxy`, `MaxIdleConnsPerHost` 2048, no fencing: the baseline.\n")
	p("- **nginx**: `proxy_pass` to a keep-alive upstream (`bench/nginx/nginx.conf.in`), 2 workers, no fencing.\n")
	p("- **nginx-lua** (when `libnginx-mod-http-lua` is installed): the same nginx plus an access-phase Lua script\n")
	p("  (`bench/nginx/fence_access.lua`) doing the same compare-and-advance: one EVALSHA per request over pooled\n")
	p("  connections, tokens compared exactly as decimal strings, 409/428/400, 503 when Redis fails.\n")
	p("- **fenceproxy**: built from the working tree as `make build` builds it, `FENCE_REDIS_URL` to a fresh\n")
	p("  `redis-server`, a routes file mapping `/r/{key}` to resource `r/{key}`, `FENCE_LOG_LEVEL=info`\n")
	p("  (every refusal logged), defaults otherwise: the drain barrier is on.\n")
	if d.hasNodrain() {
		p("- **fenceproxy-nodrain**: the same binary, the same settings, plus `FENCE_DRAIN=off`, with its own key prefix\n")
		p("  (`FENCE_KEY_PREFIX=fencend:`) in the same Redis.\n")
	}
	p("- **Redis**: a fresh `redis-server` per setting: without persistence (`--save '' --appendonly no`), or\n")
	p("  durable (`--appendonly yes --appendfsync always`: every admission is fsynced before Redis answers).\n\n")
	st0, conns := d.stats(d.settings[0])
	var wall []float64
	for _, r := range d.compare[d.settings[0]] {
		wall = append(wall, r.wall)
	}
	order := "go-plain, nginx, nginx-lua, fenceproxy"
	if d.hasNodrain() {
		order += ", fenceproxy-nodrain"
	}
	p("Load: `wrk -t2 -c%d` for about %.0f s per run, %d interleaved rounds (%s,\n",
		conns, median(wall), st0["fenceproxy"].rounds, order)
	p("then again), after a warm-up of each; every request a `PUT /r/k<n>` (1,000 resources) with a 20-byte body and\n")
	p("a 19-digit `Fencing-Token` rising per resource (`bench/wrk/put.lua`), so a correct fencing proxy admits all of\n")
	p("them. Medians over the rounds; CPU from `/proc/<pid>/stat` (utime+stime of every process of a component)\n")
	p("over each run; Redis's command statistics (`INFO commandstats`) reset before and read after each run of a\n")
	p("target that uses Redis.\n\n")
	cmdline := "bench/run-all.sh"
	if b, err := os.ReadFile(filepath.Join(d.dir, "command.txt")); err == nil {
		cmdline = strings.TrimSpace(string(b))
	}
	p("The command of this run: `%s` (from the repository's root; the load part of `make bench`), which ran, with one fenceproxy binary built by\n", cmdline)
	p("`make build`: `bench/compare.sh` (both Redis settings), `bench/openloop.sh` (both), `bench/sweep.sh`, then\n")
	p("`bench/cmd/plot` and `bench/cmd/report doc`. Their defaults: `ROUNDS=3 DURATION=8s CONNS=32 WARMUP=2`;\n")
	p("`RATE=1000 OL_DURATION=15s OL_ROUNDS=15 OL_PAIRED=20s OL_QUIET_LAG=1ms`; `SWEEP_CONNS=\"1 8 32 128\"\n")
	p("SWEEP_ROUNDS=2 SWEEP_DURATION=5s`.\n\n")
	if len(d.phases) > 0 {
		p("Duration of the run: ")
		var parts []string
		for _, ph := range d.phases {
			parts = append(parts, fmt.Sprintf("%s %s s", ph[0], ph[1]))
		}
		p("%s.\n\n", strings.Join(parts, ", "))
	}

	// ---- throughput
	p("## Throughput against go-plain, nginx and nginx+Lua\n\n")
	for _, s := range d.settings {
		st, _ := d.stats(s)
		fp := st["fenceproxy"]
		p("### Redis %s\n\n", settingName(s))
		p("| target | req/s (median) | min-max | fenceproxy ÷ target | round by round | p50 ms | p99 ms | fenceproxy p99 − target p99 | non-2xx |\n")
		p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, t := range compareOrder {
			x, ok := st[t]
			if !ok {
				continue
			}
			rr := roundRatios(d.compare[s], "fenceproxy", t, x.conns)
			ratioCol, roundCol, dp := "-", "-", "-"
			if t != "fenceproxy" {
				ratioCol = fmt.Sprintf("**%.2f**", fp.rps/x.rps)
				if len(rr) > 0 {
					roundCol = fmt.Sprintf("%.2f-%.2f", rr[0], rr[len(rr)-1])
				}
				dp = fmt.Sprintf("%+.2f ms", (fp.p99-x.p99)/1000)
			}
			p("| %s | %s | %s-%s | %s | %s | %.2f | %.2f | %s | %d |\n", t, thousands(x.rps), thousands(x.rpsMin), thousands(x.rpsMax),
				ratioCol, roundCol, x.p50/1000, x.p99/1000, dp, x.non2xx+x.sockerr)
		}
		if l := d.lines[s]; l != "" {
			p("\n```\n%s\n```\n", l)
		}
		p("\n")
	}
	p("Latency in these closed-loop runs is mostly queueing: with %d connections kept busy, p50 ≈ connections ÷ throughput.\n", conns)
	p("The open-loop run below is the latency a service sees at a rate it can sustain.\n\n")

	// ---- drain on/off
	if d.hasNodrain() || len(d.wake) > 0 {
		d.renderDrain(p)
	}

	// ---- open loop
	if len(d.openloop) > 0 {
		p("## Latency at a fixed rate (open loop)\n\n")
		o0 := d.openloop[0]
		p("`bench/cmd/openloop` sends requests on a fixed schedule whatever the answers do and measures each latency from\n")
		p("the request's **scheduled** send time, so a stall counts for every request it delays (no coordinated\n")
		p("omission). *Send lag* is how late the generator itself handed requests to its HTTP client: it is part of\n")
		p("every latency and shows how much CPU the machine's other loads left to the measurement itself.\n\n")
		p("- **Interleaved**: each target alone at %.0f requests/s, %.0f s in %d rounds (every target once per round), after\n", o0.rate, o0.seconds, len(o0.roundP99))
		p("  a warm-up; samples pooled per target.\n")
		if ps, ok := d.olFor(o0.label, "simultaneous", "fenceproxy"); ok {
			p("- **Both at once**: go-plain and fenceproxy driven at the same time for %.0f s, %.0f requests/s each (the machine\n", ps.seconds, ps.rate)
			p("  carries the same total rate), their requests alternating. A burst of a neighbour's CPU use then delays both\n")
			p("  alike, which interleaved runs seconds apart cannot promise on a shared machine.\n")
		}
		p("- A p99 difference is only a verdict on the goal when the generator itself was on time: where its send-lag\n")
		p("  p99 exceeded the 1 ms the goal is about, the difference is the machine's noise and is marked so.\n")
		p("- **… quiet segments only**: the same runs, keeping only the rounds (segments of about a second) in which the\n")
		p("  generator's own send-lag p99 stayed at or below 1 ms for go-plain and fenceproxy alike. When the generator\n")
		p("  is on time the machine was calm, so what remains is closer to what the proxies themselves add. It is a\n")
		p("  selection, shown beside the unfiltered figures, not instead of them; the fraction kept is given.\n\n")
		labels := []string{}
		for _, o := range d.openloop {
			if !slices.Contains(labels, o.label) {
				labels = append(labels, o.label)
			}
		}
		for _, l := range labels {
			p("### Redis %s\n\n", settingName(strings.TrimPrefix(l, "redis=")))
			p("| run | target | requests | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | send lag p99 ms | non-2xx / errors |\n")
			p("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
			for _, mode := range olModes {
				for _, o := range d.openloop {
					if o.label != l || o.mode != mode {
						continue
					}
					if o.n == 0 {
						p("| %s | %s | 0 | - | - | - | - | - | - | - |\n", modeName(mode)+segNote(o), o.target)
						continue
					}
					p("| %s | %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %d / %d |\n", modeName(mode)+segNote(o), o.target, o.n, o.p50/1000, o.p90/1000,
						o.p99/1000, o.p999/1000, o.max/1000, o.lagP99/1000, o.non2xx, o.errors)
				}
			}
			p("\nAdded by fenceproxy over go-plain:\n\n")
			for _, mode := range olModes {
				fp, ok1 := d.olFor(l, mode, "fenceproxy")
				gp, ok2 := d.olFor(l, mode, "go-plain")
				if !ok1 || !ok2 || fp.n == 0 || gp.n == 0 {
					continue
				}
				p("- %s%s: p50 %+.2f ms, p90 %+.2f ms, **p99 %+.2f ms** (goal ≤ +1 ms: %s)", modeName(mode), segNote(fp),
					(fp.p50-gp.p50)/1000, (fp.p90-gp.p90)/1000, (fp.p99-gp.p99)/1000, olVerdict(fp, gp))
				if len(fp.roundP99) > 1 && mode == "interleaved" {
					p("; the median over rounds of the per-round p99 difference is %+.2f ms", medianRoundDelta(fp, gp)/1000)
				}
				p(".\n")
			}
			p("\n")
		}
		if len(d.olLines) > 0 {
			p("```\n%s\n```\n\n", strings.Join(d.olLines, "\n"))
		}
	}

	// ---- sweep
	if len(d.sweep) > 1 {
		p("## Throughput and p99 against concurrency\n\n")
		p("![requests/s and p99 against client connections, fenceproxy and go-plain](performance.png)\n\n")
		p("Closed loop (wrk), Redis without persistence, connections 1 to 128, medians of interleaved rounds. Data:\n")
		p("[`performance-data.tsv`](performance-data.tsv); the plot is drawn from it by `bench/cmd/plot`.\n\n")
		col := index(d.sweep[0])
		p("| target | connections | req/s | p50 ms | p99 ms | proxy CPU µs/request | non-2xx |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, r := range d.sweep[1:] {
			rps, _ := strconv.ParseFloat(get(r, col, "rps"), 64)
			p("| %s | %s | %s | %s | %s | %s | %s |\n", get(r, col, "target"), get(r, col, "conns"), thousands(rps),
				get(r, col, "p50_ms"), get(r, col, "p99_ms"), get(r, col, "proxy_cpu_us_per_req"), get(r, col, "non2xx"))
		}
		p("\n")
		p("Ratios fenceproxy ÷ go-plain by connections: %s.\n\n", d.sweepRatios(col))
	}

	// ---- CPU
	p("## CPU per request\n\n")
	p("CPU time per request of each component (cores used over a run ÷ requests/s, median of rounds), from the\n")
	p("throughput runs above. \"other\" is the mean number of cores busy with processes this benchmark did not\n")
	p("start (neighbours on the shared VM); when it is large, every target had less CPU than the table suggests.\n\n")
	p("| Redis | target | proxy µs | Redis µs | origin µs | wrk µs | proxy cores | other cores |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, s := range d.settings {
		st, _ := d.stats(s)
		for _, t := range compareOrder {
			x, ok := st[t]
			if !ok {
				continue
			}
			redis := "-"
			if x.usRedis > 0.5 {
				redis = f0(x.usRedis)
			}
			p("| %s | %s | %s | %s | %s | %s | %.2f | %.2f |\n", s, t, f0(x.usProxy), redis, f0(x.usOrigin), f0(x.usWrk), x.cpuProxy, x.other)
		}
	}
	p("\n")

	p("**Where the throughput ratio comes from.** On this machine the load generator, the proxy, the origin and\n")
	p("Redis share the same vCPUs, so a closed-loop run that saturates them is bounded by the CPU the *whole\n")
	p("stack* spends per request. The ratio that CPU alone predicts (go-plain's stack ÷ fenceproxy's stack, both\n")
	p("proxy + Redis + origin + wrk) against the one measured:\n\n")
	p("| Redis | target | its stack µs/request | go-plain stack µs/request | ratio predicted by CPU | measured |\n| --- | --- | ---: | ---: | ---: | ---: |\n")
	for _, s := range d.settings {
		st, _ := d.stats(s)
		gp := st["go-plain"]
		gs := gp.usProxy + gp.usRedis + gp.usOrigin + gp.usWrk
		for _, t := range []string{"fenceproxy", nodrain} {
			fp, ok := st[t]
			if !ok {
				continue
			}
			fs := fp.usProxy + fp.usRedis + fp.usOrigin + fp.usWrk
			p("| %s | %s | %.0f | %.0f | %.2f | %.2f |\n", s, t, fs, gs, gs/fs, fp.rps/gp.rps)
		}
	}
	p("\nWhere the measured ratio is close to the predicted one, the gap to go-plain is CPU: fenceproxy's own\n")
	p("(compare the proxy µs) and Redis's, which a Redis on another host would not take from the proxy. Where it\n")
	p("is lower, requests also wait for something that is not CPU, such as Redis's fsync with `appendfsync always`\n")
	p("(the CPU columns then show idle time).\n\n")

	p("**Why fenceproxy can cost less CPU than go-plain while doing more.** go-plain is `httputil.ReverseProxy`\n")
	p("over `http.Transport`, which hands every request to a writeLoop goroutine and every response back from a\n")
	p("readLoop goroutine, and writes a PUT's headers and body in two writes. fenceproxy uses the same ReverseProxy,\n")
	p("but for the common request (a plain-http upstream, a body of known length up to 64 KiB, no `Expect`, no\n")
	p("`Upgrade`, no trailers) its transport (`proxy/upstream.go`) writes request line, headers and body in one write\n")
	p("on the handler's own goroutine and reads the response there; anything else goes to `http.Transport`. Its\n")
	p("Redis admissions are group-committed: every admission that queues while one script run is in flight goes\n")
	p("into the next run, so one round trip (and one fsync) serves many requests under load, and an idle proxy\n")
	p("waits for nothing. What remains of its CPU is mostly net/http's server side (reading each request, a\n")
	p("background read per request, writing the response) and ReverseProxy's header copies, which go-plain pays\n")
	p("too, and which nginx does in C without goroutines.\n\n")

	// ---- per core
	p("## What to expect per core\n\n")
	p("Requests per second one core can carry, from the CPU the proxy process itself used (1 s ÷ proxy µs per\n")
	p("request), and including the CPU Redis spent on the admissions (for a Redis on the same machine):\n\n")
	p("| Redis | target | req/s per core of proxy CPU | req/s per core of proxy + Redis CPU |\n| --- | --- | ---: | ---: |\n")
	for _, s := range d.settings {
		st, _ := d.stats(s)
		for _, t := range compareOrder {
			x, ok := st[t]
			if !ok {
				continue
			}
			both := "-"
			if x.usRedis > 0.5 {
				both = thousands(1e6 / (x.usProxy + x.usRedis))
			}
			p("| %s | %s | %s | %s |\n", s, t, thousands(1e6/x.usProxy), both)
		}
	}
	p("\nSo a sidecar given one core should carry on the order of the fenceproxy rows for small requests like these\n")
	p("(a 20-byte PUT, a 20-byte answer, a 19-digit token), as long as Redis and the service keep up. Larger bodies\n")
	p("cost more per request (copying), a remote Redis adds its round trip to every request's latency but not\n")
	p("to the proxy's CPU, and `appendfsync always` costs Redis's disk, not the proxy's CPU.\n\n")

	// ---- caveats
	p("## Caveats\n\n")
	p("- **A shared, noisy VM.** %s vCPUs shared with other engineers' test runs; the \"other\" column and the\n", m["nproc"])
	p("  per-round spread show how much. Only ratios between targets measured in the same run mean anything;\n")
	p("  absolute requests/s and milliseconds do not carry over to another machine or even another hour.\n")
	p("- **Everything on one machine.** Load generator, proxy, origin and Redis share the same vCPUs, so a\n")
	p("  cheaper proxy leaves more CPU to the others (and the other way round); on loopback there is no network\n")
	p("  latency, so Redis's round trip is far cheaper than across hosts.\n")
	p("- **Tiny bodies.** 20-byte requests and answers measure per-request overhead, not copying throughput.\n")
	p("- **One connection pattern.** Keep-alive clients, all requests PUT to 1,000 resources with fresh tokens; no\n")
	p("  refusals on the hot path, no TLS.\n")
	p("- **CPU accounting** uses 1/%s-second ticks of `/proc/<pid>/stat` over runs of several seconds.\n\n", "100")

	// ---- cross-check
	p("## Cross-check with the shared harness\n\n")
	if d.crosscheck != "" {
		p("The same binary measured once with the team's shared harness (`../shared/bench`, not part of this\n")
		p("repository; its own upstream, baseline, nginx configuration and load script), as an independent check of\n")
		p("the ratios above. Its summary lines, verbatim:\n\n```\n%s\n```\n\n", d.crosscheck)
	} else {
		p("Not run for this report.\n\n")
	}

	// ---- reproduce
	p("## How to reproduce\n\n")
	p("On Debian (as root, or with sudo):\n\n```sh\n")
	p("apt-get install -y redis-server nginx wrk curl libnginx-mod-http-lua   # the Lua module is optional\n")
	p("make bench         # the Go micro-benchmarks, then bench/run-all.sh: about 11 minutes; rewrites\n")
	p("                   # docs/performance.{md,png} and docs/performance-data.tsv (raw results under bench/results/)\n")
	p("make bench-quick   # QUICK=1 bench/run-all.sh: about 2 minutes, results under bench/results/ only\n")
	p("```\n\n")
	p("Or one step at a time (each prints its summary lines on stdout, details on stderr):\n\n```sh\n")
	p("bench/compare.sh                        # throughput, both Redis settings (REDIS_DURABLE=0 or 1 for one)\n")
	p("bench/openloop.sh                       # latency at 1,000 req/s (RATE, OL_DURATION)\n")
	p("bench/sweep.sh                          # throughput and p99 at 1, 8, 32, 128 connections (SWEEP_CONNS)\n")
	p("cd bench && go run ./cmd/plot -data ../docs/performance-data.tsv -out ../docs/performance.png\n")
	p("```\n\n")
	p("Knobs: `ROUNDS` (3), `DURATION` (8s), `CONNS` (32), `PORT_BASE` (28100; ports PORT_BASE..+9 must be free),\n")
	p("`NGINX_LUA=0` to leave the peer out, `NODRAIN=0` to leave fenceproxy-nodrain out, `WAKE_N` (100; 0: no\n")
	p("drain-wake measurement), `FENCEPROXY_BIN` to measure a given binary, `KEEP_RUN=1` to keep logs.\n")
	p("A run with non-2xx answers prints fenceproxy's decision counters and refusal log lines for that run.\n")
	p("The harness's own smoke test: `cd bench && go test -run TestCompareQuick .` (skipped with `-short` or without\n")
	p("wrk, nginx, redis-server).\n")
	for _, sec := range d.kept {
		p("\n%s", sec)
	}
	return b.String()
}

// handWritten returns the sections of a performance.md that were written by
// hand, not by this command: each "## " heading whose first line of text
// starts with "Hand-written", with everything up to the next "## " heading
// (lines inside ``` fences are never headings), ending in one newline.
func handWritten(md string) []string {
	var out []string
	var sec []string
	flush := func() {
		if len(sec) == 0 {
			return
		}
		for _, l := range sec[1:] {
			if t := strings.TrimSpace(l); t != "" {
				if strings.HasPrefix(t, "Hand-written") {
					out = append(out, strings.TrimRight(strings.Join(sec, "\n"), "\n")+"\n")
				}
				break
			}
		}
		sec = nil
	}
	fenced := false
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
		}
		if !fenced && strings.HasPrefix(l, "## ") {
			flush()
			sec = []string{l}
			continue
		}
		if sec != nil {
			sec = append(sec, l)
		}
	}
	flush()
	return out
}

func (d *runData) sweepRatios(col map[string]int) string {
	byT := map[string]map[string]float64{}
	var conns []string
	for _, r := range d.sweep[1:] {
		t, c := get(r, col, "target"), get(r, col, "conns")
		v, _ := strconv.ParseFloat(get(r, col, "rps"), 64)
		if byT[t] == nil {
			byT[t] = map[string]float64{}
		}
		byT[t][c] = v
		if !slices.Contains(conns, c) {
			conns = append(conns, c)
		}
	}
	var parts []string
	for _, c := range conns {
		f, g := byT["fenceproxy"][c], byT["go-plain"][c]
		if f > 0 && g > 0 {
			parts = append(parts, fmt.Sprintf("%s: %.2f", c, f/g))
		}
	}
	return strings.Join(parts, ", ")
}

// medianRoundDelta is the median over rounds of a's p99 minus b's, in µs: a
// burst of a neighbour's load lands in one round and moves the pooled p99 of
// whichever target ran then, but moves the median of the rounds little.
func medianRoundDelta(a, b olRow) float64 {
	var ds []float64
	for i := range min(len(a.roundP99), len(b.roundP99)) {
		ds = append(ds, a.roundP99[i]-b.roundP99[i])
	}
	return median(ds)
}

// olModes are the ways the open-loop samples are summarised, in doc order.
var olModes = []string{"interleaved", "simultaneous", "interleaved-quiet", "simultaneous-quiet"}

func modeName(mode string) string {
	switch mode {
	case "interleaved":
		return "interleaved"
	case "simultaneous":
		return "both at once"
	case "interleaved-quiet":
		return "interleaved, quiet segments"
	case "simultaneous-quiet":
		return "both at once, quiet segments"
	}
	return mode
}

// segNote says how many segments a quiet selection kept.
func segNote(o olRow) string {
	if o.segments == "" || o.segments == "-" {
		return ""
	}
	return " (" + o.segments + " segments)"
}

// olVerdict judges a p99 difference against the goal, unless the load
// generator's own send lag exceeded the goal: then the difference measures
// the machine, not the proxies.
func olVerdict(fp, gp olRow) string {
	lag := math.Max(fp.lagP99, gp.lagP99) / 1000
	if lag > goalAddedP99ms {
		return fmt.Sprintf("noise-dominated, the generator's send lag p99 was %.1f ms: no verdict", lag)
	}
	return verdict((fp.p99-gp.p99)/1000 <= goalAddedP99ms)
}

// hasNodrain reports whether the run measured fenceproxy-nodrain.
func (d *runData) hasNodrain() bool {
	for _, s := range d.settings {
		for _, r := range d.compare[s] {
			if r.target == nodrain {
				return true
			}
		}
	}
	return false
}

// wakeFor is target's drainwake rows, in the order of the settings.
func (d *runData) wakeFor(target string) []wakeRow {
	var out []wakeRow
	for _, w := range d.wake {
		if w.target == target {
			out = append(out, w)
		}
	}
	return out
}

// drainOutcomes sums the drain_* counters in the decisions of st's runs:
// "none 123456, waited 3" (outcomes in the order first seen), or "-".
func drainOutcomes(st stats) string {
	sum := map[string]int64{}
	var order []string
	for _, dec := range st.decisions {
		for _, kv := range strings.Split(dec, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || !strings.HasPrefix(k, "drain_") {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			k = strings.TrimPrefix(k, "drain_")
			if _, seen := sum[k]; !seen {
				order = append(order, k)
			}
			sum[k] += n
		}
	}
	if len(order) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range order {
		parts = append(parts, fmt.Sprintf("%s %s", k, thousands(float64(sum[k]))))
	}
	return strings.Join(parts, ", ")
}

// renderDrain writes the section on the drain barrier's cost: throughput
// and CPU with it on and off, Redis's commands per request, and the wait of
// a newer generation after its older request completed.
func (d *runData) renderDrain(p func(string, ...any)) {
	p("## The drain barrier: on against off\n\n")
	p("With the barrier on (the default), the admission script also enters the request into the resource's\n")
	p("in-flight set (`{fence:<resource>}:inflight`: `TIME`, `ZADD`, `PTTL`/`PEXPIRE`, `ZRANGEBYLEX` in the same\n")
	p("script run), and every completed request sends a release (batched, off the request path). fenceproxy and\n")
	p("fenceproxy-nodrain ran in the same rounds, against the same Redis; *on ÷ off* is the barrier's cost\n")
	p("(goal ≥ %.2f). Under this load (tokens rising per resource, each wrk thread cycling over its 500\n", goalDrainOnOff)
	p("resources) an older request of the same resource is almost never still in flight, so the barrier\n")
	p("costs its bookkeeping, not waiting: the drain outcomes below say how often a request did wait.\n\n")
	if d.hasNodrain() {
		p("| Redis | fenceproxy req/s (on) | fenceproxy-nodrain req/s (off) | on ÷ off | round by round | on ÷ off predicted by CPU | p99 ms on / off | proxy µs/request on / off | Redis µs/request on / off | non-2xx on / off |\n")
		p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, s := range d.settings {
			st, _ := d.stats(s)
			fp, ok1 := st["fenceproxy"]
			nd, ok2 := st[nodrain]
			if !ok1 || !ok2 {
				continue
			}
			rr := roundRatios(d.compare[s], "fenceproxy", nodrain, fp.conns)
			rounds := "-"
			if len(rr) > 0 {
				rounds = fmt.Sprintf("%.2f-%.2f", rr[0], rr[len(rr)-1])
			}
			stack := func(x stats) float64 { return x.usProxy + x.usRedis + x.usOrigin + x.usWrk }
			p("| %s | %s | %s | **%.2f** | %s | %.2f | %.2f / %.2f | %.0f / %.0f | %.0f / %.0f | %d / %d |\n", s, thousands(fp.rps), thousands(nd.rps),
				fp.rps/nd.rps, rounds, stack(nd)/stack(fp), fp.p99/1000, nd.p99/1000, fp.usProxy, nd.usProxy, fp.usRedis, nd.usRedis,
				fp.non2xx+fp.sockerr, nd.non2xx+nd.sockerr)
		}
		p("\n*Predicted by CPU*: the whole stack's CPU per request (proxy + Redis + origin + wrk, all on the same vCPUs) with\n")
		p("the barrier off ÷ with it on, as in [CPU per request](#cpu-per-request): the ratio a saturated machine would show\n")
		p("if nothing but CPU mattered, and less disturbed by a neighbour's burst than requests/s.\n")
		p("\nThe same against go-plain (goals ≥ %.2f without persistence, ≥ %.2f with `appendfsync always`):\n\n", goalThrNone, goalThrDurable)
		p("| Redis | fenceproxy ÷ go-plain (on) | round by round | fenceproxy-nodrain ÷ go-plain (off) | round by round | goal |\n")
		p("| --- | ---: | ---: | ---: | ---: | --- |\n")
		for _, s := range d.settings {
			st, _ := d.stats(s)
			fp, gp, nd := st["fenceproxy"], st["go-plain"], st[nodrain]
			span := func(a string) string {
				rr := roundRatios(d.compare[s], a, "go-plain", fp.conns)
				if len(rr) == 0 {
					return "-"
				}
				return fmt.Sprintf("%.2f-%.2f", rr[0], rr[len(rr)-1])
			}
			goal := goalFor(s)
			p("| %s | **%.2f** | %s | %.2f | %s | ≥ %.2f: %s with the barrier on |\n", s, fp.rps/gp.rps, span("fenceproxy"),
				nd.rps/gp.rps, span(nodrain), goal, verdict(fp.rps/gp.rps >= goal))
		}
		p("\n")
		var any bool
		for _, s := range d.settings {
			if len(d.cmds[s]) > 0 {
				any = true
			}
		}
		if any {
			p("Redis's own count of what each target's runs made it do (`INFO commandstats`, reset before each run; commands\n")
			p("a script calls count on their own as well, so a script's µs include theirs), per request answered:\n\n")
			p("| Redis | target | command | calls per request | Redis µs per request (its own timing) |\n| --- | --- | --- | ---: | ---: |\n")
			for _, s := range d.settings {
				for _, t := range []string{"fenceproxy", nodrain} {
					for _, c := range commandsPerRequest(d.cmds[s], s, t) {
						if c.callsPerReq < 0.001 {
							continue
						}
						p("| %s | %s | %s | %.3f | %.2f |\n", s, t, c.command, c.callsPerReq, c.usecPerReq)
					}
				}
			}
			p("\n")
		}
		p("Drain outcomes of fenceproxy's measured requests (`fenceproxy_drain_total`, by outcome): ")
		var parts []string
		for _, s := range d.settings {
			st, _ := d.stats(s)
			parts = append(parts, fmt.Sprintf("Redis %s: %s", s, drainOutcomes(st["fenceproxy"])))
		}
		p("%s.\n\n", strings.Join(parts, "; "))
	}
	if len(d.wake) > 0 {
		w0 := d.wake[0]
		p("**The wait of a newer generation.** `bench/cmd/drainwake`, after the throughput rounds of each setting (no load\n")
		p("of the benchmark's own running): %d times per target, on a resource of its own, an older request (token T) that the\n", w0.n)
		p("origin holds %.0f ms, and %.0f ms after it a newer one (T+1). With the barrier on, the newer request is admitted\n", w0.hold, w0.gap)
		p("and then waits until the older one has been answered; *after older* is the end of the newer answer minus the\n")
		p("end of the older answer, seen by the client: the release, the wake, the check, and the newer request's own\n")
		p("trip to the origin and back (about a *lone* request's latency, less its admission). Goal: median under %.0f ms.\n", goalDrainWake)
		p("*Newer overtook older* counts the pairs whose newer answer the client read first (left out of *after older*):\n")
		p("with the barrier on, the proxy has written the older answer before it releases the older request, so that\n")
		p("is the client reading its older connection late on a busy machine. The barrier's own test is *at the origin*:\n")
		p("pairs whose newer request reached the origin while the origin still held the older one (\"-\": not measured\n")
		p("in this run). *Reordered*: the older request was admitted after the newer one (refused 409), not measured.\n\n")
		p("| Redis | target | pairs | after older p50 ms | p90 ms | p99 ms | max ms | lone request p50 ms | newer overtook older (client) | newer reached the origin while older held | reordered / errors |\n")
		p("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, w := range d.wake {
			msOr := func(us float64) string {
				if math.IsNaN(us) {
					return "-"
				}
				return fmt.Sprintf("%.2f", us/1000)
			}
			overlapped := "-"
			if w.overlapped >= 0 {
				overlapped = strconv.Itoa(w.overlapped)
			}
			p("| %s | %s | %d | %s | %s | %s | %s | %s | %d | %s | %d / %d |\n", strings.TrimPrefix(w.label, "redis="), w.target, w.n,
				msOr(w.p50), msOr(w.p90), msOr(w.p99), msOr(w.max), msOr(w.lone), w.overtook, overlapped, w.reordered, w.errors)
		}
		p("\nWith the barrier off, a newer request reaching the origin while the older one is still there is the race the\n")
		p("barrier closes.\n\n")
	}
	if len(d.wakeLines) > 0 {
		p("```\n%s\n```\n\n", strings.Join(d.wakeLines, "\n"))
	}
}

package main

import (
	"bytes"
	_ "embed"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/template"
)

// The goals, as ratios or deltas measured in one run.
const (
	goalThrNone    = 0.95 // fenceproxy / go-plain, Redis without persistence
	goalThrDurable = 0.75 // fenceproxy / go-plain, appendfsync always
	goalAddedP99ms = 1.0  // open loop: fenceproxy p99 - go-plain p99
	goalDrainOnOff = 0.9  // fenceproxy (drain barrier on) / fenceproxy-nodrain (FENCE_DRAIN=off)
	goalDrainWake  = 5.0  // ms: median wait of a newer generation after the older request completed
)

// docCmd writes docs/performance.md (performance.md.tmpl executed over the
// document computed from the run) from the files one bench/run-all.sh run
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
	var md bytes.Buffer
	if err := d.write(&md); err != nil {
		return err
	}
	if err := os.WriteFile(*out, md.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "report: wrote %s\n", *out)
	return nil
}

// performance.md.tmpl is the text of docs/performance.md. It words and
// formats what document computes: the Go code does the arithmetic (medians,
// ratios, differences, verdicts against the goals), the template says it.
// testdata/*/performance.md.golden show a change to either as a diff.
//
//go:embed performance.md.tmpl
var docText string

var docTemplate = template.Must(template.New("performance.md").Funcs(template.FuncMap{
	"f0":        func(x float64) string { return fmt.Sprintf("%.0f", x) },
	"f1":        func(x float64) string { return fmt.Sprintf("%.1f", x) },
	"f2":        func(x float64) string { return fmt.Sprintf("%.2f", x) },
	"f3":        func(x float64) string { return fmt.Sprintf("%.3f", x) },
	"signed":    func(x float64) string { return fmt.Sprintf("%+.2f", x) },
	"opt2":      opt2,
	"whole":     whole,
	"thousands": thousands,
	"cell":      func(s string) string { return strings.ReplaceAll(s, "|", "/") },
	"plus":      plus,
	"isNaN":     math.IsNaN,
}).Parse(docText))

// write executes the template over the run's document.
func (d *runData) write(w io.Writer) error {
	return docTemplate.Execute(w, d.document())
}

// opt2 is x with two decimals, "-" when it is NaN (not measured).
func opt2(x float64) string {
	if math.IsNaN(x) {
		return "-"
	}
	return fmt.Sprintf("%.2f", x)
}

// whole is x rounded to an integer (half away from zero), "-" when it is NaN.
func whole(x float64) string {
	if math.IsNaN(x) {
		return "-"
	}
	return strconv.FormatFloat(math.Round(x), 'f', 0, 64)
}

// plus is x rounded to an integer with its sign and thousands separators
// ("+1,234", "-56", "0"), "-" when it is NaN.
func plus(x float64) string {
	switch r := math.Round(x); {
	case math.IsNaN(x):
		return "-"
	case r > 0:
		return "+" + thousands(r)
	case r < 0:
		return "-" + thousands(-r)
	}
	return "0"
}

// thousands is x rounded to an integer with thousands separators ("12,345"),
// "-" when it is NaN.
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

// document is everything performance.md.tmpl says about one run. Latencies
// are in milliseconds (fields ending in ms), CPU in microseconds per request
// (Us...) or cores.
type document struct {
	Date, Commit string
	Quick        bool
	HandWritten  []string // sections carried over from the previous doc, in its order
	HasNodrain   bool     // fenceproxy-nodrain was measured
	HasTrace     bool     // fenceproxy-trace-unsampled was measured
	LuaMissing   string   // why nginx-lua was not measured ("": it was)
	Machine      map[string]string
	NCPU         float64
	Goals        goals
	Settings     []*setting // the compare runs, by Redis setting, in order

	// the summary's lines that are not by setting
	Wake          *wakeSummary // nil: drainwake measured no fenceproxy
	Noise         *noise       // nil: no compare rows
	Failed        int64        // fenceproxy's non-2xx answers and socket errors under load, all settings
	NodrainFailed int64
	ChecksOK      bool        // every functional check before measuring passed
	PerCore       *targetView // fenceproxy, Redis without persistence (nil: not run)

	// what was measured: the first setting's load
	Conns   int
	WallS   float64 // median length of a run
	Rounds  int
	Command string
	Phases  []phase

	Drain       bool // the drain barrier's section: fenceproxy-nodrain or drainwake measured
	HasCommands bool // Redis's command statistics were recorded
	WakeRows    []wakeView
	WakeLines   []string // drain-wake summary lines
	OpenLoop    *openLoop
	Sweep       *sweep
	Features    *features // go test -bench BenchmarkFeature (nil: not run)
	Crosscheck  string
}

type goals struct {
	ThrNone, ThrDurable, AddedP99ms, DrainOnOff, DrainWake float64
	CPUVsGoPlain, RedisOnOff, TraceCPU, BeatLua            float64
}

type phase struct{ Name, Seconds string }

// setting is the compare runs at one Redis setting.
type setting struct {
	Key, Name string  // "none", and how the doc says it
	Goal      float64 // throughput goal, fenceproxy ÷ go-plain
	Met       bool    // fenceproxy ÷ go-plain >= Goal
	Targets   []*targetView
	// never nil; Measured says whether the target ran at this setting
	FP, GP, ND, NG, NL, TR *targetView
	Fenced                 []*targetView // fenceproxy and fenceproxy-nodrain, those measured
	DrainMet               bool          // fenceproxy ÷ fenceproxy-nodrain >= the goal
	PredictedOnOff         float64       // whole-stack CPU per request, off ÷ on
	HasScriptRuns          bool
	ScriptRunsOn           float64 // Redis script runs per request, drain on and off
	ScriptRunsOff          float64
	Commands               []commandView // fenceproxy's, then fenceproxy-nodrain's
	DrainOutcomes          []outcome     // of fenceproxy's requests
	Line                   string        // its compare[...] summary line
	OpenLoopRate           float64       // req/s of the interleaved open-loop runs
	OpenLoop               []olCompare   // fenceproxy against go-plain, by mode
	OLGoal                 *olCompare    // the one the goal is judged on (nil: no open-loop run)
	Wake                   *wakePart     // drainwake's fenceproxy at this setting (nil: not measured)

	// the goals on CPU (goals.go), per admitted request
	CPU        cpuGoal // fenceproxy's own ÷ go-plain's
	RedisOnOff cpuGoal // Redis's, barrier on ÷ off
	Trace      cpuGoal // fenceproxy-trace-unsampled ÷ fenceproxy
	LuaCPU     cpuGoal // fenceproxy + its Redis ÷ nginx-lua + its Redis
	LuaThrMet  bool    // fenceproxy's req/s above nginx-lua's
	LuaDead    bool    // nginx-lua was measured but answered nothing
	// Redis commands per request (every command Redis counted, a script's own among them), on and off
	HasCommandsOn, HasCommandsOff bool
	CommandsOn, CommandsOff       float64
}

// targetView is one target's medians at one setting.
type targetView struct {
	Name                 string
	Measured             bool
	Subject              bool // fenceproxy itself
	Rounds               int
	RPS, RPSMin, RPSMax  float64
	P50ms, P99ms         float64
	Failed               int64 // non-2xx answers and socket errors
	UsProxy, UsRedis     float64
	UsProxyOK, UsRedisOK float64 // per admitted request (2xx answer)
	UsOrigin, UsWrk      float64
	UsesRedis            bool    // more than half a µs of Redis CPU per request
	Stack                float64 // proxy + Redis + origin + wrk µs per request
	CPUProxy, Other      float64 // cores
	PerCore              float64 // req/s per core of proxy CPU
	PerCoreWithRedis     float64 // per core of proxy + Redis CPU
	// fenceproxy against this target
	Ratio       float64 // fenceproxy req/s ÷ this target's
	RoundRatios span
	AddedP99ms  float64 // fenceproxy p99 − this target's
	// this target against go-plain
	VsGoPlain          float64
	VsGoPlainRounds    span
	PredictedVsGoPlain float64 // go-plain's stack µs ÷ this target's
}

// span is the lowest and highest of N round-by-round ratios.
type span struct {
	Lo, Hi float64
	N      int
}

func spanOf(rr []float64) span {
	if len(rr) == 0 {
		return span{}
	}
	return span{Lo: rr[0], Hi: rr[len(rr)-1], N: len(rr)}
}

type commandView struct {
	Target, Command string
	Calls, Usec     float64 // per request
}

type outcome struct {
	Name string
	N    float64
}

type wakeSummary struct {
	Parts       []wakePart
	On, Off     []pairs // pairs that reached the origin together, barrier on and off
	OffAtOrigin bool    // Off counts at the origin (else: answers overtaken at the client)
}

type wakePart struct {
	Key, Name                   string // the Redis setting, and how the doc says it
	Measured                    int
	Overtook, Reordered, Errors int
	P50ms, P99ms                float64
	Met                         bool
}

type pairs struct{ K, N int }

type noise struct {
	Mean, Lo, Hi float64 // cores busy with processes the benchmark did not start
	LagKnown     bool
	LagMaxMs     float64 // the open-loop generator's worst send-lag p99
}

type wakeView struct {
	Setting, Target                         string
	N                                       int
	Hold, Gap                               float64 // ms
	P50ms, P90ms, P99ms, MaxMs, LoneMs      float64 // NaN: not measured
	Overtook, Overlapped, Reordered, Errors int     // Overlapped -1: not measured
}

type openLoop struct {
	Rate, Seconds float64 // of the first interleaved run
	Rounds        int
	Both          *olBoth // the first label's simultaneous run (nil: none)
	Labels        []olLabel
	Lines         []string
}

type olBoth struct{ Seconds, Rate float64 }

type olLabel struct {
	Name  string
	Rows  []olView
	Added []olCompare
}

type olView struct {
	Mode, Target, Segments                       string
	N                                            int
	P50ms, P90ms, P99ms, P999ms, MaxMs, LagP99ms float64
	Non2xx, Errors                               int
}

// olCompare is fenceproxy against go-plain in one open-loop mode.
type olCompare struct {
	Mode, Segments           string  // Segments: "kept/total" of a quiet selection, else ""
	P50ms, P90ms, AddedP99ms float64 // fenceproxy − go-plain
	FPms, GPms               float64 // their p99s
	Noisy                    bool    // the generator's own send lag exceeded the goal: no verdict
	LagMs                    float64
	Met                      bool
	HasRoundDelta            bool
	RoundDeltaMs             float64 // median over rounds of the per-round p99 difference
}

type sweep struct {
	Rows   []sweepRow
	Ratios []sweepRatio
}

type sweepRow struct {
	Target, Conns, P50ms, P99ms, ProxyUs, Non2xx string // as in the data file
	RPS                                          float64
}

type sweepRatio struct {
	Conns string
	Ratio float64
}

// document computes what the doc says from the run.
func (d *runData) document() *document {
	m := d.machine
	doc := &document{
		Date: m["date"], Commit: m["commit"], Quick: d.quick, HandWritten: d.kept, HasNodrain: d.hasNodrain(),
		HasTrace: d.has(traced), LuaMissing: d.luaMissing(), Features: d.features,
		Machine: m, NCPU: d.ncpu, Command: d.command, Crosscheck: d.crosscheck, WakeLines: d.wakeLines,
		Goals: goals{ThrNone: goalThrNone, ThrDurable: goalThrDurable, AddedP99ms: goalAddedP99ms, DrainOnOff: goalDrainOnOff, DrainWake: goalDrainWake,
			CPUVsGoPlain: goalCPUVsGoPlain, RedisOnOff: goalRedisOnOff, TraceCPU: goalTraceCPU, BeatLua: goalBeatLua},
	}
	for _, s := range d.settings {
		doc.Settings = append(doc.Settings, d.setting(s))
	}

	doc.Wake = d.wakeSummary()
	if doc.Wake != nil {
		for i := range doc.Wake.Parts {
			for _, s := range doc.Settings {
				if s.Key == doc.Wake.Parts[i].Key {
					s.Wake = &doc.Wake.Parts[i]
				}
			}
		}
	}
	doc.ChecksOK = true
	for _, s := range doc.Settings {
		doc.Failed += s.FP.Failed
		doc.NodrainFailed += s.ND.Failed
		if l := d.lines[s.Key]; l != "" && (!strings.HasSuffix(l, "stale-check=ok") ||
			(strings.Contains(l, " nodrain-check=") && !strings.Contains(l, " nodrain-check=ok ")) ||
			(strings.Contains(l, " trace-check=") && !strings.Contains(l, " trace-check=ok "))) {
			doc.ChecksOK = false
		}
	}
	var others []float64
	for _, s := range d.settings {
		for _, r := range d.compare[s] {
			others = append(others, math.Max(0, d.ncpu-r.cpuProxy-r.cpuOrigin-r.cpuRedis-r.cpuWrk-r.cpuIdle-r.cpuSteal))
		}
	}
	if len(others) > 0 {
		var lagMax float64
		for _, o := range d.openloop {
			lagMax = math.Max(lagMax, o.lagP99)
		}
		n := &noise{Mean: mean(others), LagKnown: lagMax > 0, LagMaxMs: lagMax / 1000}
		n.Lo, n.Hi = minMax(others)
		doc.Noise = n
	}
	for _, s := range doc.Settings {
		if s.Key == "none" {
			doc.PerCore = s.FP
		}
	}

	first := doc.Settings[0]
	doc.Conns = d.compare[d.settings[0]][0].conns
	doc.Rounds = first.FP.Rounds
	var wall []float64
	for _, r := range d.compare[d.settings[0]] {
		wall = append(wall, r.wall)
	}
	doc.WallS = median(wall)
	for _, ph := range d.phases {
		doc.Phases = append(doc.Phases, phase{Name: ph[0], Seconds: ph[1]})
	}

	doc.Drain = doc.HasNodrain || len(d.wake) > 0
	for _, s := range d.settings {
		if len(d.cmds[s]) > 0 {
			doc.HasCommands = true
		}
	}
	for _, w := range d.wake {
		doc.WakeRows = append(doc.WakeRows, wakeView{Setting: strings.TrimPrefix(w.label, "redis="), Target: w.target, N: w.n,
			Hold: w.hold, Gap: w.gap, P50ms: w.p50 / 1000, P90ms: w.p90 / 1000, P99ms: w.p99 / 1000, MaxMs: w.max / 1000, LoneMs: w.lone / 1000,
			Overtook: w.overtook, Overlapped: w.overlapped, Reordered: w.reordered, Errors: w.errors})
	}
	doc.OpenLoop = d.openLoop()
	doc.Sweep = d.sweepData()
	return doc
}

// setting computes the medians and ratios of the compare runs at s.
func (d *runData) setting(s string) *setting {
	st, conns := d.stats(s)
	rows := d.compare[s]
	fp, gp := st["fenceproxy"], st["go-plain"]
	view := func(t string) *targetView {
		x, ok := st[t]
		v := &targetView{Name: t, Measured: ok, Subject: t == "fenceproxy", Rounds: x.rounds,
			RPS: x.rps, RPSMin: x.rpsMin, RPSMax: x.rpsMax, P50ms: x.p50 / 1000, P99ms: x.p99 / 1000, Failed: x.non2xx + x.sockerr,
			UsProxy: x.usProxy, UsRedis: x.usRedis, UsProxyOK: x.usProxyOK, UsRedisOK: x.usRedisOK, UsOrigin: x.usOrigin, UsWrk: x.usWrk, UsesRedis: x.usRedis > 0.5,
			Stack: x.usProxy + x.usRedis + x.usOrigin + x.usWrk, CPUProxy: x.cpuProxy, Other: x.other,
			PerCore: 1e6 / x.usProxy, PerCoreWithRedis: 1e6 / (x.usProxy + x.usRedis),
			Ratio: fp.rps / x.rps, RoundRatios: spanOf(roundRatios(rows, "fenceproxy", t, conns)), AddedP99ms: (fp.p99 - x.p99) / 1000,
			VsGoPlain: x.rps / gp.rps, VsGoPlainRounds: spanOf(roundRatios(rows, t, "go-plain", conns)),
		}
		v.PredictedVsGoPlain = (gp.usProxy + gp.usRedis + gp.usOrigin + gp.usWrk) / v.Stack
		return v
	}
	v := &setting{Key: s, Name: settingName(s), Goal: goalFor(s), Line: d.lines[s]}
	for _, t := range compareOrder {
		if _, ok := st[t]; ok {
			v.Targets = append(v.Targets, view(t))
		}
	}
	v.FP, v.GP, v.ND, v.NG, v.NL, v.TR = view("fenceproxy"), view("go-plain"), view(nodrain), view("nginx"), view("nginx-lua"), view(traced)
	v.cpuGoals(st, rows, conns)
	v.Met = v.FP.VsGoPlain >= v.Goal
	v.DrainMet = v.ND.Ratio >= goalDrainOnOff
	v.PredictedOnOff = v.ND.Stack / v.FP.Stack
	for _, t := range []*targetView{v.FP, v.ND} {
		if t.Measured {
			v.Fenced = append(v.Fenced, t)
		}
	}

	con, coff := commandsPerRequest(d.cmds[s], s, "fenceproxy"), commandsPerRequest(d.cmds[s], s, nodrain)
	if len(con) > 0 && len(coff) > 0 {
		v.HasScriptRuns, v.ScriptRunsOn, v.ScriptRunsOff = true, scriptRuns(con), scriptRuns(coff)
	}
	v.HasCommandsOn, v.CommandsOn = len(con) > 0, totalCalls(con)
	v.HasCommandsOff, v.CommandsOff = len(coff) > 0, totalCalls(coff)
	for _, t := range []string{"fenceproxy", nodrain} {
		for _, c := range commandsPerRequest(d.cmds[s], s, t) {
			if c.callsPerReq >= 0.001 {
				v.Commands = append(v.Commands, commandView{Target: t, Command: c.command, Calls: c.callsPerReq, Usec: c.usecPerReq})
			}
		}
	}
	v.DrainOutcomes = drainOutcomes(fp)

	o, _ := d.olFor("redis="+s, "interleaved", "fenceproxy")
	v.OpenLoopRate = o.rate
	for _, mode := range olModes {
		fp, ok1 := d.olFor("redis="+s, mode, "fenceproxy")
		gp, ok2 := d.olFor("redis="+s, mode, "go-plain")
		if ok1 && ok2 && fp.n > 0 && gp.n > 0 {
			v.OpenLoop = append(v.OpenLoop, olAgainst(mode, fp, gp))
		}
	}
	v.OLGoal = olGoal(v.OpenLoop)
	return v
}

// olAgainst compares fenceproxy's open-loop run with go-plain's in mode.
// The difference of p99s is judged against the goal unless the load
// generator's own send lag exceeded the goal: then it measures the machine,
// not the proxies.
func olAgainst(mode string, fp, gp olRow) olCompare {
	lag := math.Max(fp.lagP99, gp.lagP99) / 1000
	c := olCompare{Mode: mode, Segments: segments(fp), P50ms: (fp.p50 - gp.p50) / 1000, P90ms: (fp.p90 - gp.p90) / 1000,
		AddedP99ms: (fp.p99 - gp.p99) / 1000, FPms: fp.p99 / 1000, GPms: gp.p99 / 1000,
		Noisy: lag > goalAddedP99ms, LagMs: lag, Met: (fp.p99-gp.p99)/1000 <= goalAddedP99ms}
	if len(fp.roundP99) > 1 && mode == "interleaved" {
		c.HasRoundDelta, c.RoundDeltaMs = true, medianRoundDelta(fp, gp)/1000
	}
	return c
}

// segments is "kept/total" for a quiet selection, else "".
func segments(o olRow) string {
	if o.segments == "-" {
		return ""
	}
	return o.segments
}

// wakeSummary is the summary's line on bench/cmd/drainwake (nil when it
// measured no fenceproxy).
func (d *runData) wakeSummary() *wakeSummary {
	w := d.wakeFor("fenceproxy")
	if len(w) == 0 {
		return nil
	}
	ws := &wakeSummary{}
	for _, x := range w {
		ws.Parts = append(ws.Parts, wakePart{Key: strings.TrimPrefix(x.label, "redis="), Name: settingName(strings.TrimPrefix(x.label, "redis=")), Measured: x.measured,
			Overtook: x.overtook, Reordered: x.reordered, Errors: x.errors, P50ms: x.p50 / 1000, P99ms: x.p99 / 1000,
			Met: x.p50/1000 < goalDrainWake})
		if x.overlapped >= 0 {
			ws.On = append(ws.On, pairs{x.overlapped, x.n})
		}
	}
	off := d.wakeFor(nodrain)
	for _, x := range off {
		if x.overlapped >= 0 {
			ws.Off = append(ws.Off, pairs{x.overlapped, x.n})
		} else {
			ws.Off = append(ws.Off, pairs{x.overtook, x.n})
		}
	}
	ws.OffAtOrigin = len(off) > 0 && off[0].overlapped >= 0
	return ws
}

func (d *runData) openLoop() *openLoop {
	if len(d.openloop) == 0 {
		return nil
	}
	o0 := d.openloop[0]
	ol := &openLoop{Rate: o0.rate, Seconds: o0.seconds, Rounds: len(o0.roundP99), Lines: d.olLines}
	if ps, ok := d.olFor(o0.label, "simultaneous", "fenceproxy"); ok {
		ol.Both = &olBoth{Seconds: ps.seconds, Rate: ps.rate}
	}
	var labels []string
	for _, o := range d.openloop {
		if !slices.Contains(labels, o.label) {
			labels = append(labels, o.label)
		}
	}
	for _, l := range labels {
		lv := olLabel{Name: settingName(strings.TrimPrefix(l, "redis="))}
		for _, mode := range olModes {
			for _, o := range d.openloop {
				if o.label == l && o.mode == mode {
					lv.Rows = append(lv.Rows, olView{Mode: mode, Target: o.target, Segments: segments(o), N: o.n,
						P50ms: o.p50 / 1000, P90ms: o.p90 / 1000, P99ms: o.p99 / 1000, P999ms: o.p999 / 1000, MaxMs: o.max / 1000,
						LagP99ms: o.lagP99 / 1000, Non2xx: o.non2xx, Errors: o.errors})
				}
			}
			fp, ok1 := d.olFor(l, mode, "fenceproxy")
			gp, ok2 := d.olFor(l, mode, "go-plain")
			if ok1 && ok2 && fp.n > 0 && gp.n > 0 {
				lv.Added = append(lv.Added, olAgainst(mode, fp, gp))
			}
		}
		ol.Labels = append(ol.Labels, lv)
	}
	return ol
}

// sweepData is the sweep's data file as a table, and fenceproxy's
// throughput over go-plain's at each connection count (nil: no data).
func (d *runData) sweepData() *sweep {
	if len(d.sweep) <= 1 {
		return nil
	}
	col := index(d.sweep[0])
	sw := &sweep{}
	byT := map[string]map[string]float64{}
	var conns []string
	for _, r := range d.sweep[1:] {
		t, c := get(r, col, "target"), get(r, col, "conns")
		rps, _ := strconv.ParseFloat(get(r, col, "rps"), 64)
		sw.Rows = append(sw.Rows, sweepRow{Target: t, Conns: c, RPS: rps, P50ms: get(r, col, "p50_ms"), P99ms: get(r, col, "p99_ms"),
			ProxyUs: get(r, col, "proxy_cpu_us_per_req"), Non2xx: get(r, col, "non2xx")})
		if byT[t] == nil {
			byT[t] = map[string]float64{}
		}
		byT[t][c] = rps
		if !slices.Contains(conns, c) {
			conns = append(conns, c)
		}
	}
	for _, c := range conns {
		f, g := byT["fenceproxy"][c], byT["go-plain"][c]
		if f > 0 && g > 0 {
			sw.Ratios = append(sw.Ratios, sweepRatio{Conns: c, Ratio: f / g})
		}
	}
	return sw
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

// drainOutcomes sums the drain_* counters in the decisions of st's runs, by
// outcome in the order first seen.
func drainOutcomes(st stats) []outcome {
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
	var out []outcome
	for _, k := range order {
		out = append(out, outcome{Name: k, N: float64(sum[k])})
	}
	return out
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

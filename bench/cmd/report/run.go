package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// runData is what one bench/run-all.sh run left in its results directory
// (read by loadRun); document.go turns it into docs/performance.md.
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
	command    string   // command.txt: the command line of the run, with the knobs that were set
	kept       []string // hand-written sections of the previous doc, carried over (handWritten)
	ncpu       float64
	cmds       map[string][]cmdRow // Redis commands per run, by setting
	wake       []wakeRow           // bench/cmd/drainwake, drainwake.tsv
	wakeLines  []string
	features   *features // features.out (and features-callgrind.tsv), nil when absent
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
	if d.features, err = loadFeatures(dir); err != nil {
		return nil, err
	}
	d.command = "bench/run-all.sh"
	if b, err := os.ReadFile(filepath.Join(dir, "command.txt")); err == nil {
		d.command = strings.TrimSpace(string(b))
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

// hasNodrain reports whether the run measured fenceproxy-nodrain.
func (d *runData) hasNodrain() bool { return d.has(nodrain) }

// has reports whether the run's compare rows measured target.
func (d *runData) has(target string) bool {
	for _, s := range d.settings {
		for _, r := range d.compare[s] {
			if r.target == target {
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

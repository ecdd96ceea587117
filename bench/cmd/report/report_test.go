package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// synthetic returns compare rows at setting for three rounds: per target its
// requests/s in rounds 1, 2, 3 (every other column fixed).
func synthetic(setting string, rps map[string][3]float64) []row {
	var rows []row
	for round := 1; round <= 3; round++ {
		for _, t := range []string{"go-plain", "nginx", "fenceproxy", nodrain} {
			x, ok := rps[t]
			if !ok {
				continue
			}
			r := row{setting: setting, target: t, round: round, conns: 32, rps: x[round-1], p50: 3000, p99: 10000,
				cpuProxy: 0.8, cpuOrigin: 0.4, cpuWrk: 0.2, cpuIdle: 0.1, wall: 8}
			if t == "fenceproxy" || t == nodrain {
				r.cpuRedis = 0.2
				r.decisions = "admitted=100"
				if t == "fenceproxy" {
					r.decisions += ",drain_none=99,drain_waited=1"
				}
			}
			rows = append(rows, r)
		}
	}
	return rows
}

func statsOf(rows []row) map[string]stats {
	st := map[string]stats{}
	for _, t := range targetsIn(rows) {
		st[t] = summarize(rows, t, 32, 2)
	}
	return st
}

// The summary line compare_test.go parses (bench/compare_test.go's summaryLine).
var summaryLine = regexp.MustCompile(`^compare\[redis=(none|durable)\]: fenceproxy=(\d+)rps/p99=([0-9.]+)ms go-plain=(\d+)rps/p99=([0-9.]+)ms .*\| thr/go-plain=([0-9.]+) thr/nginx=([0-9.]+).* \| non2xx=(\d+) sockerr=(\d+).* stale-check=(\S+)$`)

func TestCompareLineDrainOnOff(t *testing.T) {
	rows := synthetic("none", map[string][3]float64{
		"go-plain":   {10000, 10000, 10000},
		"nginx":      {20000, 20000, 20000},
		"fenceproxy": {9000, 9600, 9200},
		nodrain:      {10000, 10000, 8000},
	})
	st := statsOf(rows)
	cmds := []cmdRow{
		{setting: "none", round: 1, target: "fenceproxy", requests: 1000, command: "evalsha", calls: 300, usec: 6000},
		{setting: "none", round: 1, target: "fenceproxy", requests: 1000, command: "zadd", calls: 1000, usec: 2000},
		{setting: "none", round: 1, target: nodrain, requests: 1000, command: "evalsha", calls: 200, usec: 2000},
	}
	l := compareLine("none", rows, st, 32, checks{stale: "ok", nodrain: "ok"}, cmds)
	if !summaryLine.MatchString(l) {
		t.Fatalf("summary line does not parse:\n%s", l)
	}
	for _, want := range []string{
		" fenceproxy-nodrain=10000rps/p99=10.00ms ",
		" thr/go-plain=0.92 thr/nginx=0.46 (rounds 0.90-0.96) goal>=0.95:MISSED ",
		// medians 9200 / 10000; rounds 9000/10000, 9600/10000, 9200/8000
		" | nodrain/go-plain=1.00 (rounds 0.80-1.00) ",
		" | drain-on/off=0.92 (rounds 0.90-1.15) goal>=0.90:met ",
		"+0.00ms vs fenceproxy-nodrain",
		" fenceproxy-nodrain=80(+redis 20)",
		" | redis_calls/req fenceproxy=zadd:1.000,evalsha:0.300 fenceproxy-nodrain=evalsha:0.200 ",
		" nodrain-non2xx=0 nodrain-check=ok stale-check=ok",
	} {
		if !strings.Contains(l, want) {
			t.Errorf("line lacks %q:\n%s", want, l)
		}
	}
	// without fenceproxy-nodrain the line has no on/off part
	var only []row
	for _, r := range rows {
		if r.target != nodrain {
			only = append(only, r)
		}
	}
	l = compareLine("durable", only, statsOf(only), 32, checks{stale: "ok"}, nil)
	if strings.Contains(l, "drain-on/off") || strings.Contains(l, "nodrain") || !strings.Contains(l, "goal>=0.75:met") {
		t.Errorf("without nodrain, durable:\n%s", l)
	}
	if !summaryLine.MatchString(l) {
		t.Errorf("summary line does not parse:\n%s", l)
	}
}

func TestRoundRatiosOnOff(t *testing.T) {
	rows := synthetic("none", map[string][3]float64{"fenceproxy": {9, 10, 12}, nodrain: {10, 10, 10}})
	got := roundRatios(rows, "fenceproxy", nodrain, 32)
	want := []float64{0.9, 1, 1.2}
	if len(got) != len(want) {
		t.Fatalf("roundRatios = %v, want %v", got, want)
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-9 {
			t.Fatalf("roundRatios = %v, want %v", got, want)
		}
	}
	st := statsOf(rows)
	if r := rpsRatio(st, "fenceproxy", nodrain); math.Abs(r-1) > 1e-9 {
		t.Errorf("rpsRatio = %v, want 1 (medians 10/10)", r)
	}
	if r := rpsRatio(st, "fenceproxy", "go-plain"); !math.IsNaN(r) {
		t.Errorf("rpsRatio against a missing target = %v, want NaN", r)
	}
	for _, c := range []struct {
		r, goal float64
		want    string
	}{{0.9, 0.9, "met"}, {0.89, 0.9, "MISSED"}, {math.NaN(), 0.9, "-"}, {1, math.NaN(), "-"}} {
		if got := goalWord(c.r, c.goal); got != c.want {
			t.Errorf("goalWord(%v, %v) = %q, want %q", c.r, c.goal, got, c.want)
		}
	}
}

func TestCommandsPerRequest(t *testing.T) {
	rows := []cmdRow{
		{setting: "none", round: 1, target: "fenceproxy", requests: 1000, command: "evalsha", calls: 100, usec: 5000},
		{setting: "none", round: 1, target: "fenceproxy", requests: 1000, command: "zadd", calls: 1000, usec: 1000},
		{setting: "none", round: 2, target: "fenceproxy", requests: 3000, command: "evalsha", calls: 300, usec: 15000},
		{setting: "none", round: 2, target: "fenceproxy", requests: 3000, command: "zadd", calls: 3000, usec: 3000},
		{setting: "none", round: 1, target: nodrain, requests: 500, command: "evalsha", calls: 5, usec: 50},
		{setting: "durable", round: 1, target: "fenceproxy", requests: 10, command: "evalsha", calls: 10, usec: 10},
	}
	cs := commandsPerRequest(rows, "none", "fenceproxy")
	if len(cs) != 2 || cs[0].command != "zadd" || cs[1].command != "evalsha" {
		t.Fatalf("commandsPerRequest = %+v", cs)
	}
	if cs[0].callsPerReq != 1 || cs[1].callsPerReq != 0.1 || cs[1].usecPerReq != 5 {
		t.Errorf("per request: %+v", cs)
	}
	if got := scriptRuns(cs); got != 0.1 {
		t.Errorf("scriptRuns = %v, want 0.1", got)
	}
	if got := formatCommands(cs, ", "); got != "zadd 1.000/req 1.0us/req, evalsha 0.100/req 5.0us/req" {
		t.Errorf("formatCommands = %q", got)
	}
}

// TestDocDrain renders the doc from a synthetic run directory and checks
// what it says about the barrier.
func TestDocDrain(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("machine.tsv", "date\t2026-12-01T00:00:00Z\nnproc\t2\ncommit\tabc1234\n")
	const cols = "setting\tround\ttarget\tconns\trps\trequests\tp50_us\tp90_us\tp99_us\tmax_us\tnon2xx\tsockerr\tstatuses\tcpu_proxy\tcpu_origin\tcpu_redis\tcpu_wrk\tcpu_idle\tcpu_steal\twall_s\tdecisions\n"
	for _, s := range []string{"none", "durable"} {
		var b strings.Builder
		b.WriteString(cols)
		for round := 1; round <= 3; round++ {
			for _, x := range []struct {
				target string
				rps    float64
				redis  float64
				dec    string
			}{{"go-plain", 10000, 0, "-"}, {"fenceproxy", 9700, 0.3, "admitted=100,upstream_errors=0,drain_none=99,drain_waited=1"}, {nodrain, 10000, 0.2, "admitted=100,upstream_errors=0"}} {
				fmt.Fprintf(&b, "%s\t%d\t%s\t32\t%.1f\t%d\t3000\t5000\t10000\t20000\t0\t0\t-\t0.800\t0.400\t%.3f\t0.200\t0.100\t0.000\t8.000\t%s\n",
					s, round, x.target, x.rps, int(x.rps*8), x.redis, x.dec)
			}
		}
		write("compare-"+s+".tsv", b.String())
		write("compare-"+s+"-redis.tsv", "setting\tround\ttarget\trequests\tcommand\tcalls\tusec\tcalls_per_req\n"+
			s+"\t1\tfenceproxy\t1000\tevalsha\t300\t9000\t0.300\n"+
			s+"\t1\tfenceproxy\t1000\tzadd\t1000\t2000\t1.000\n"+
			s+"\t1\tfenceproxy-nodrain\t1000\tevalsha\t200\t3000\t0.200\n")
	}
	write("drainwake.tsv", "label\ttarget\tn\thold_ms\tgap_ms\tmeasured\tafter_older_p50_us\tafter_older_p90_us\tafter_older_p99_us\tafter_older_max_us\tlone_p50_us\tovertook\treordered\terrors\toverlapped\n"+
		"redis=none\tfenceproxy\t100\t20.00\t5.00\t98\t1200\t1500\t2500\t3000\t900\t2\t0\t0\t0\n"+
		"redis=none\tfenceproxy-nodrain\t100\t20.00\t5.00\t0\t-\t-\t-\t-\t900\t100\t0\t0\t97\n")
	write("compare.out", "compare[redis=none]: x nodrain-check=ok stale-check=ok\ndrain-wake[redis=none]: hold=20ms gap=5ms fenceproxy n=100\n")
	d, err := loadRun(dir, dir)
	if err != nil {
		t.Fatal(err)
	}
	md := d.render()
	for _, want := range []string{
		"the drain barrier on (`FENCE_DRAIN=on`, the default)",
		"fenceproxy (drain barrier on) does **0.97×** go-plain (goal ≥ 0.95: **met**)",
		"- Drain barrier on ÷ off, Redis without persistence: **0.97** (goal ≥ 0.90: **met**), round by round 0.97-0.97; fenceproxy-nodrain does 1.00× go-plain. CPU per request on vs off: fenceproxy 82 vs 80 µs, Redis 31 vs 20 µs; Redis script runs per request 0.300 vs 0.200",
		"median **1.20 ms**, p99 2.50 ms (goal median < 5 ms: **met**)",
		"With the barrier on, the newer request reached the origin while it still held the older one in 0 of 100 pairs; with it off, in 97 of 100.",
		"## The drain barrier: on against off",
		"| durable | **0.97** | 0.97-0.97 | 1.00 | 1.00-1.00 | ≥ 0.75: **met** with the barrier on |",
		"| none | fenceproxy | evalsha | 0.300 | 9.00 |",
		"Redis without persistence" /* the summary */, "Redis none: none 297, waited 3",
		"| none | fenceproxy | 100 | 1.20 | 1.50 | 2.50 | 3.00 | 0.90 | 2 | 0 | 0 / 0 |",
		"| none | fenceproxy-nodrain | 100 | - | - | - | - | 0.90 | 100 | 97 | 0 / 0 |",
		"| none | 9,700 | 10,000 | **0.97** | 0.97-0.97 | 0.91 |",
		"drain-wake[redis=none]: hold=20ms",
		"| none | fenceproxy-nodrain | ",
		"Make bench"[1:],
	} {
		if !strings.Contains(md, want) {
			t.Errorf("doc lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("doc:\n%s", md)
	}
}

// TestHandWrittenKept: the hand-written sections of the previous doc (and
// only those, fences and all) come back after the generated ones.
func TestHandWrittenKept(t *testing.T) {
	prev := "# Performance\n\nGenerated.\n\n## Summary\n\n- generated\n\n## How to reproduce\n\nold text\n\n" +
		"## Signed tokens\n\nHand-written; not produced by `bench/run-all.sh`. One.\n\n```sh\n## not a heading\n```\n\n### a subsection\n\nstill one\n\n" +
		"## Generated later\n\nnot kept\n\n" +
		"## Authorization mode\n\n\nHand-written; two.\n"
	kept := handWritten(prev)
	want := []string{
		"## Signed tokens\n\nHand-written; not produced by `bench/run-all.sh`. One.\n\n```sh\n## not a heading\n```\n\n### a subsection\n\nstill one\n",
		"## Authorization mode\n\n\nHand-written; two.\n",
	}
	if fmt.Sprint(kept) != fmt.Sprint(want) {
		t.Fatalf("handWritten:\n%q\nwant\n%q", kept, want)
	}

	dir := t.TempDir()
	var rows strings.Builder
	rows.WriteString("setting\tround\ttarget\tconns\trps\trequests\tp50_us\tp90_us\tp99_us\tmax_us\tnon2xx\tsockerr\tstatuses\tcpu_proxy\tcpu_origin\tcpu_redis\tcpu_wrk\tcpu_idle\tcpu_steal\twall_s\tdecisions\n")
	for _, tg := range []string{"go-plain", "fenceproxy"} {
		fmt.Fprintf(&rows, "none\t1\t%s\t32\t9000.0\t72000\t3000\t5000\t10000\t20000\t0\t0\t-\t0.800\t0.400\t0.200\t0.200\t0.100\t0.000\t8.000\t-\n", tg)
	}
	for name, text := range map[string]string{
		"machine.tsv":      "date\t2026-12-01T00:00:00Z\nnproc\t2\ncommit\tabc1234\n",
		"compare-none.tsv": rows.String(),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d, err := loadRun(dir, dir)
	if err != nil {
		t.Fatal(err)
	}
	d.kept = kept
	md := d.render()
	i, j, k := strings.Index(md, "## How to reproduce"), strings.Index(md, want[0]), strings.Index(md, want[1])
	if i < 0 || j < i || k < j || !strings.HasSuffix(md, want[1]) {
		t.Errorf("kept sections missing or out of place (reproduce %d, first %d, second %d):\n%s", i, j, k, md)
	}
	if !strings.Contains(md, "except in the hand-written sections at the end") {
		t.Error("the header does not say some sections are not from this run")
	}
	if strings.Contains(md, "not kept") {
		t.Error("a generated section of the previous doc was carried over")
	}
	if again := handWritten(md); fmt.Sprint(again) != fmt.Sprint(want) {
		t.Errorf("a regenerated doc does not keep them again: %q", again)
	}
}

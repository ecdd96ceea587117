package main

import (
	"math"
	"testing"
)

// TestCPUGoals: each CPU goal is a ratio of two targets' CPU per admitted
// request against its ceiling, met at the ceiling itself (below it for
// beating nginx-lua), unknown when either target is missing.
func TestCPUGoals(t *testing.T) {
	// one round; CPU per request in µs = cores × 10⁶ ÷ req/s
	rowsOf := func(us map[string][2]float64) []row { // target -> proxy µs, Redis µs
		var rows []row
		for tg, u := range us {
			rows = append(rows, row{setting: "none", target: tg, round: 1, conns: 32, rps: 1000, requests: 8000,
				cpuProxy: u[0] / 1000, cpuRedis: u[1] / 1000})
		}
		return rows
	}
	for _, c := range []struct {
		name                   string
		us                     map[string][2]float64
		cpu, redis, trace, lua string // "met", "not met", "-" (not known)
		cpuRatio, luaRatio     float64
		luaThr                 bool
	}{
		{name: "every goal met at its ceiling", us: map[string][2]float64{"go-plain": {100, 0}, "fenceproxy": {75, 24}, nodrain: {80, 20},
			traced: {77.25, 24}, "nginx-lua": {60, 39}}, cpu: "met", redis: "met", trace: "met", lua: "not met", cpuRatio: 0.75, luaRatio: 1},
		{name: "just above every ceiling", us: map[string][2]float64{"go-plain": {100, 0}, "fenceproxy": {76, 24.1}, nodrain: {80, 20},
			traced: {78.5, 24}, "nginx-lua": {50, 40}}, cpu: "not met", redis: "not met", trace: "not met", lua: "not met", cpuRatio: 0.76, luaRatio: 100.1 / 90},
		{name: "below nginx-lua", us: map[string][2]float64{"go-plain": {100, 0}, "fenceproxy": {70, 20}, "nginx-lua": {70, 21}},
			cpu: "met", redis: "-", trace: "-", lua: "met", cpuRatio: 0.7, luaRatio: 90.0 / 91},
		{name: "only fenceproxy", us: map[string][2]float64{"fenceproxy": {70, 20}}, cpu: "-", redis: "-", trace: "-", lua: "-",
			cpuRatio: math.NaN(), luaRatio: math.NaN()},
	} {
		t.Run(c.name, func(t *testing.T) {
			rows := rowsOf(c.us)
			st := statsOf(rows)
			v := &setting{NL: &targetView{}}
			if s, ok := st["nginx-lua"]; ok {
				v.NL = &targetView{Measured: true, RPS: s.rps, Ratio: st["fenceproxy"].rps / s.rps}
			}
			v.cpuGoals(st, rows, 32)
			word := func(g cpuGoal) string {
				switch {
				case !g.Known:
					return "-"
				case g.Met:
					return "met"
				}
				return "not met"
			}
			for _, x := range []struct {
				what      string
				got, want string
			}{{"cpu", word(v.CPU), c.cpu}, {"redis on/off", word(v.RedisOnOff), c.redis}, {"trace", word(v.Trace), c.trace}, {"lua cpu", word(v.LuaCPU), c.lua}} {
				if x.got != x.want {
					t.Errorf("%s: %s, want %s", x.what, x.got, x.want)
				}
			}
			if v.CPU.Known && math.Abs(v.CPU.Ratio-c.cpuRatio) > 1e-9 || !v.CPU.Known && !math.IsNaN(c.cpuRatio) {
				t.Errorf("cpu ratio %v, want %v", v.CPU.Ratio, c.cpuRatio)
			}
			if v.LuaCPU.Known && math.Abs(v.LuaCPU.Ratio-c.luaRatio) > 1e-9 {
				t.Errorf("lua ratio %v, want %v", v.LuaCPU.Ratio, c.luaRatio)
			}
			// equal throughput does not beat nginx-lua
			if v.LuaThrMet {
				t.Errorf("throughput equal to nginx-lua's counted as beating it")
			}
		})
	}
}

// TestPerAdmitted: CPU per admitted request counts only the 2xx answers, and
// is per request when the run's requests are unknown.
func TestPerAdmitted(t *testing.T) {
	for _, c := range []struct {
		r    row
		want float64
	}{
		{row{rps: 1000, requests: 8000, cpuProxy: 0.1}, 100},
		{row{rps: 1000, requests: 8000, non2xx: 4000, cpuProxy: 0.1}, 200},
		{row{rps: 1000, cpuProxy: 0.1}, 100},
		{row{rps: 1000, requests: 10, non2xx: 10, cpuProxy: 0.1}, 100}, // nothing admitted: no division by zero
	} {
		if got := usPerOK(c.r, c.r.cpuProxy); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("usPerOK(%+v) = %v, want %v", c.r, got, c.want)
		}
	}
}

func TestCeilingWord(t *testing.T) {
	for _, c := range []struct {
		r, goal float64
		strict  bool
		want    string
	}{{0.75, 0.75, false, "met"}, {0.75, 0.75, true, "MISSED"}, {0.7, 0.75, true, "met"}, {0.76, 0.75, false, "MISSED"},
		{math.NaN(), 1, false, "-"}, {math.Inf(1), 1, false, "-"}} {
		if got := ceilingWord(c.r, c.goal, c.strict); got != c.want {
			t.Errorf("ceilingWord(%v, %v, %v) = %q, want %q", c.r, c.goal, c.strict, got, c.want)
		}
	}
}

// TestLuaMissing says why nginx-lua has no figure: its module absent, left
// out by the knob, or simply not in the results.
func TestLuaMissing(t *testing.T) {
	in := &runData{settings: []string{"none"}, compare: map[string][]row{"none": {{target: "nginx-lua"}}}, machine: map[string]string{"nginx_lua": "absent"}}
	if got := in.luaMissing(); got != "" {
		t.Errorf("measured: %q", got)
	}
	for _, c := range []struct{ lua, command, want string }{
		{"absent", "bench/run-all.sh", "libnginx-mod-http-lua is not installed on this machine"},
		{"1:0.10", "NGINX_LUA=0 bench/run-all.sh", "left out of this run (NGINX_LUA=0)"},
		{"1:0.10", "bench/run-all.sh", "not in this run's results"},
	} {
		d := &runData{settings: []string{"none"}, compare: map[string][]row{"none": {{target: "fenceproxy"}}},
			machine: map[string]string{"nginx_lua": c.lua}, command: c.command}
		if got := d.luaMissing(); got != c.want {
			t.Errorf("%s, %s: %q, want %q", c.lua, c.command, got, c.want)
		}
	}
}

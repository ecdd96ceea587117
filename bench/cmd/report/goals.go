package main

import (
	"math"
	"strings"
)

// The goals on CPU, each a ratio of two targets measured in the same
// interleaved rounds, per admitted request (per 2xx answer: usPerOK).
const (
	goalCPUVsGoPlain = 0.75 // fenceproxy's own CPU ÷ go-plain's
	goalRedisOnOff   = 1.2  // Redis's CPU with the drain barrier on ÷ off
	goalTraceCPU     = 1.03 // fenceproxy's CPU with tracing wired, nothing sampled ÷ tracing off
	goalBeatLua      = 1.0  // fenceproxy ÷ nginx-lua: above in throughput, below in CPU (+ each one's Redis)
)

// traced is fenceproxy with OTEL_TRACES_EXPORTER=otlp and
// OTEL_TRACES_SAMPLER=always_off (compare.sh, Redis without persistence).
const traced = "fenceproxy-trace-unsampled"

// cpuGoal is a ratio of CPU per admitted request, A ÷ B, against a ceiling.
type cpuGoal struct {
	Known  bool    // both targets were measured at this setting
	A, B   float64 // µs per admitted request, medians over the rounds
	Ratio  float64 // A ÷ B
	Rounds span    // the per-round ratios' lowest and highest
	Goal   float64
	Met    bool // Ratio <= Goal (below Goal when Strict)
	Strict bool
}

// cpuGoalOf compares a's CPU with b's at one setting; cpu is the column (a
// row's CPU per admitted request) and of the same from a target's medians.
func cpuGoalOf(st map[string]stats, rows []row, conns int, a, b string, goal float64, strict bool,
	cpu func(row) float64, of func(stats) float64) cpuGoal {
	x, ok1 := st[a]
	y, ok2 := st[b]
	g := cpuGoal{Goal: goal, Strict: strict}
	if !ok1 || !ok2 || !(of(y) > 0) || math.IsNaN(of(x)) {
		return g
	}
	g.Known, g.A, g.B = true, of(x), of(y)
	g.Ratio = g.A / g.B
	g.Rounds = spanOf(roundCPURatios(rows, a, b, conns, cpu))
	g.Met = g.Ratio <= goal
	if strict {
		g.Met = g.Ratio < goal
	}
	return g
}

func proxyOK(r row) float64 { return usPerOK(r, r.cpuProxy) }
func redisOK(r row) float64 { return usPerOK(r, r.cpuRedis) }

// stackOK is a proxy's CPU and its Redis's, per admitted request.
func stackOK(r row) float64 { return usPerOK(r, r.cpuProxy+r.cpuRedis) }

// cpuGoals fills in v's CPU goals from the medians st and the rows of the setting.
func (v *setting) cpuGoals(st map[string]stats, rows []row, conns int) {
	proxy := func(s stats) float64 { return s.usProxyOK }
	redis := func(s stats) float64 { return s.usRedisOK }
	stack := func(s stats) float64 { return s.usProxyOK + s.usRedisOK }
	v.CPU = cpuGoalOf(st, rows, conns, "fenceproxy", "go-plain", goalCPUVsGoPlain, false, proxyOK, proxy)
	v.RedisOnOff = cpuGoalOf(st, rows, conns, "fenceproxy", nodrain, goalRedisOnOff, false, redisOK, redis)
	v.Trace = cpuGoalOf(st, rows, conns, traced, "fenceproxy", goalTraceCPU, false, proxyOK, proxy)
	v.LuaCPU = cpuGoalOf(st, rows, conns, "fenceproxy", "nginx-lua", goalBeatLua, true, stackOK, stack)
	// a peer that answered nothing is not beaten: its ratio is infinite, its CPU per request unknown
	v.LuaDead = v.NL.Measured && !(v.NL.RPS > 0)
	v.LuaThrMet = v.NL.Measured && !v.LuaDead && v.NL.Ratio > goalBeatLua
}

// luaMissing says why nginx-lua is not in the run ("": it is), from the
// machine's description and the knobs of the command.
func (d *runData) luaMissing() string {
	for _, s := range d.settings {
		for _, r := range d.compare[s] {
			if r.target == "nginx-lua" {
				return ""
			}
		}
	}
	switch {
	case d.machine["nginx_lua"] == "absent":
		return "libnginx-mod-http-lua is not installed on this machine"
	case strings.Contains(d.command, "NGINX_LUA=0"):
		return "left out of this run (NGINX_LUA=0)"
	}
	return "not in this run's results"
}

// olGoal is the open-loop comparison the goal is judged on: the quiet
// segments of the interleaved runs when there are any, else the first mode.
func olGoal(cs []olCompare) *olCompare {
	for i := range cs {
		if cs[i].Mode == "interleaved-quiet" {
			return &cs[i]
		}
	}
	if len(cs) > 0 {
		return &cs[0]
	}
	return nil
}

package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// row is one closed-loop wrk run, as bench/lib.sh's measure writes it.
type row struct {
	setting, target string
	round, conns    int
	rps             float64
	requests        int64
	p50, p90, p99   float64 // microseconds
	max             float64
	non2xx, sockerr int64
	statuses        string
	cpuProxy        float64 // cores
	cpuOrigin       float64
	cpuRedis        float64
	cpuWrk          float64
	cpuIdle         float64
	cpuSteal        float64
	wall            float64
	decisions       string
}

// readRows reads a results TSV (header line first, columns by name).
func readRows(path string) ([]row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var col map[string]int
	var rows []row
	line := 0
	for sc.Scan() {
		line++
		fields := strings.Split(sc.Text(), "\t")
		if col == nil {
			col = make(map[string]int, len(fields))
			for i, name := range fields {
				col[name] = i
			}
			for _, need := range []string{"setting", "round", "target", "conns", "rps", "p99_us", "non2xx", "cpu_proxy"} {
				if _, ok := col[need]; !ok {
					return nil, fmt.Errorf("%s: no column %q in the header", path, need)
				}
			}
			continue
		}
		var bad error
		str := func(name string) string {
			i, ok := col[name]
			if !ok || i >= len(fields) {
				return ""
			}
			return fields[i]
		}
		num := func(name string) float64 {
			s := str(name)
			if s == "" || s == "-" {
				return 0
			}
			v, err := strconv.ParseFloat(s, 64)
			if err != nil && bad == nil {
				bad = fmt.Errorf("%s:%d: column %s: %v", path, line, name, err)
			}
			return v
		}
		r := row{
			setting:   str("setting"),
			target:    str("target"),
			round:     int(num("round")),
			conns:     int(num("conns")),
			rps:       num("rps"),
			requests:  int64(num("requests")),
			p50:       num("p50_us"),
			p90:       num("p90_us"),
			p99:       num("p99_us"),
			max:       num("max_us"),
			non2xx:    int64(num("non2xx")),
			sockerr:   int64(num("sockerr")),
			statuses:  str("statuses"),
			cpuProxy:  num("cpu_proxy"),
			cpuOrigin: num("cpu_origin"),
			cpuRedis:  num("cpu_redis"),
			cpuWrk:    num("cpu_wrk"),
			cpuIdle:   num("cpu_idle"),
			cpuSteal:  num("cpu_steal"),
			wall:      num("wall_s"),
			decisions: str("decisions"),
		}
		if bad != nil {
			return nil, bad
		}
		rows = append(rows, r)
	}
	return rows, sc.Err()
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func minMax(xs []float64) (lo, hi float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	return slices.Min(xs), slices.Max(xs)
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// stats summarises the rounds of one target (at one setting and concurrency).
type stats struct {
	target         string
	conns          int
	rounds         int
	rps            float64 // median over rounds
	rpsMin, rpsMax float64
	p50, p99       float64 // medians, microseconds
	non2xx         int64
	sockerr        int64
	// CPU per request in microseconds (median over rounds of cores*1e6/rps).
	usProxy, usOrigin, usRedis, usWrk float64
	// the same per admitted request: per 2xx answer (usPerOK), what the goals are stated in
	usProxyOK, usRedisOK float64
	cpuProxy, cpuRedis   float64 // median cores
	other                float64 // mean cores used by nothing we started
	statuses, decisions  []string
}

func summarize(rows []row, target string, conns int, ncpu float64) stats {
	st := stats{target: target, conns: conns}
	var rps, p50, p99, up, uo, ur, uw, upOK, urOK, cp, cr, other []float64
	for _, r := range rows {
		if r.target != target || r.conns != conns {
			continue
		}
		st.rounds++
		rps = append(rps, r.rps)
		p50 = append(p50, r.p50)
		p99 = append(p99, r.p99)
		cp = append(cp, r.cpuProxy)
		cr = append(cr, r.cpuRedis)
		if r.rps > 0 {
			up = append(up, r.cpuProxy*1e6/r.rps)
			uo = append(uo, r.cpuOrigin*1e6/r.rps)
			ur = append(ur, r.cpuRedis*1e6/r.rps)
			uw = append(uw, r.cpuWrk*1e6/r.rps)
			upOK = append(upOK, usPerOK(r, r.cpuProxy))
			urOK = append(urOK, usPerOK(r, r.cpuRedis))
		}
		if ncpu > 0 {
			other = append(other, math.Max(0, ncpu-r.cpuProxy-r.cpuOrigin-r.cpuRedis-r.cpuWrk-r.cpuIdle-r.cpuSteal))
		}
		st.non2xx += r.non2xx
		st.sockerr += r.sockerr
		if r.statuses != "" && r.statuses != "-" {
			st.statuses = append(st.statuses, r.statuses)
		}
		if r.decisions != "" && r.decisions != "-" {
			st.decisions = append(st.decisions, r.decisions)
		}
	}
	st.rps = median(rps)
	st.rpsMin, st.rpsMax = minMax(rps)
	st.p50, st.p99 = median(p50), median(p99)
	st.usProxy, st.usOrigin, st.usRedis, st.usWrk = median(up), median(uo), median(ur), median(uw)
	st.usProxyOK, st.usRedisOK = median(upOK), median(urOK)
	st.cpuProxy, st.cpuRedis = median(cp), median(cr)
	st.other = mean(other)
	return st
}

// usPerOK is cores of CPU over a run (cores × 10⁶ ÷ req/s: µs per request)
// per 2xx answer of that run: per admitted request, for a fencing proxy,
// whose refusals (409) and failures are the non-2xx. When the run's answers
// are unknown (no requests column) it is per request.
func usPerOK(r row, cores float64) float64 {
	us := cores * 1e6 / r.rps
	if r.requests > 0 && r.non2xx < r.requests {
		us *= float64(r.requests) / float64(r.requests-r.non2xx)
	}
	return us
}

// roundCPURatios returns, round by round, a's CPU per admitted request over
// b's, sorted: each is what cpu (usPerOK of a run's column) says of the two
// runs of one round.
func roundCPURatios(rows []row, a, b string, conns int, cpu func(row) float64) []float64 {
	return roundRatiosOf(rows, a, b, conns, func(r row) (float64, bool) { return cpu(r), r.rps > 0 })
}

// roundRatios returns, round by round, the throughput of a over that of b
// (the runs of one round are next to each other in time, so their ratio is
// the least disturbed by a neighbour's load).
func roundRatios(rows []row, a, b string, conns int) []float64 {
	return roundRatiosOf(rows, a, b, conns, func(r row) (float64, bool) { return r.rps, true })
}

// roundRatiosOf returns, round by round, value of a's run over value of
// b's, sorted, for the runs at conns whose value is known (ok); a round
// whose b value is not above 0 has no ratio.
func roundRatiosOf(rows []row, a, b string, conns int, value func(row) (float64, bool)) []float64 {
	ra, rb := map[int]float64{}, map[int]float64{}
	for _, r := range rows {
		v, ok := value(r)
		if r.conns != conns || !ok {
			continue
		}
		switch r.target {
		case a:
			ra[r.round] = v
		case b:
			rb[r.round] = v
		}
	}
	var out []float64
	for round, x := range ra {
		if y, ok := rb[round]; ok && y > 0 {
			out = append(out, x/y)
		}
	}
	slices.Sort(out)
	return out
}

func targetsIn(rows []row) []string {
	var ts []string
	for _, r := range rows {
		if !slices.Contains(ts, r.target) {
			ts = append(ts, r.target)
		}
	}
	return ts
}

// cmdRow is one Redis command's count over one run (lib.sh's
// redis_commands): Redis's statistics were reset before the run, so they
// are the commands that target's requests (and its releases) caused.
type cmdRow struct {
	setting, target, command string
	round                    int
	requests, calls, usec    int64
}

// readCmdRows reads a compare-SETTING-redis.tsv file.
func readCmdRows(path string) ([]cmdRow, error) {
	t, err := readTSV(path)
	if err != nil {
		return nil, err
	}
	if len(t) == 0 {
		return nil, nil
	}
	col := index(t[0])
	for _, need := range []string{"setting", "round", "target", "requests", "command", "calls", "usec"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("%s: no column %q in the header", path, need)
		}
	}
	var out []cmdRow
	for i, r := range t[1:] {
		var bad error
		n := func(name string) int64 {
			v, err := strconv.ParseInt(get(r, col, name), 10, 64)
			if err != nil && bad == nil {
				bad = fmt.Errorf("%s:%d: column %s: %v", path, i+2, name, err)
			}
			return v
		}
		c := cmdRow{setting: get(r, col, "setting"), target: get(r, col, "target"), command: get(r, col, "command"),
			round: int(n("round")), requests: n("requests"), calls: n("calls"), usec: n("usec")}
		if bad != nil {
			return nil, bad
		}
		if c.command == "" {
			return nil, fmt.Errorf("%s:%d: no command", path, i+2)
		}
		out = append(out, c)
	}
	return out, nil
}

// cmdStat is what Redis did per request for one target: each command's
// calls and microseconds per request, over all its runs.
type cmdStat struct {
	command                     string
	callsPerReq, usecPerReq     float64
	calls, usec, requestsOfRuns int64
}

// commandsPerRequest sums target's runs at setting: every command's calls
// and Redis-side microseconds divided by the requests of those runs, the
// busiest first. Commands called from scripts count on their own too, so
// an EVALSHA's usec includes its ZADD's.
func commandsPerRequest(rows []cmdRow, setting, target string) []cmdStat {
	requests := map[int]int64{}
	by := map[string]*cmdStat{}
	for _, r := range rows {
		if r.setting != setting || r.target != target {
			continue
		}
		requests[r.round] = r.requests
		c := by[r.command]
		if c == nil {
			c = &cmdStat{command: r.command}
			by[r.command] = c
		}
		c.calls += r.calls
		c.usec += r.usec
	}
	var total int64
	for _, n := range requests {
		total += n
	}
	var out []cmdStat
	for _, c := range by {
		c.requestsOfRuns = total
		if total > 0 {
			c.callsPerReq = float64(c.calls) / float64(total)
			c.usecPerReq = float64(c.usec) / float64(total)
		}
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b cmdStat) int {
		if a.calls != b.calls {
			if a.calls > b.calls {
				return -1
			}
			return 1
		}
		return strings.Compare(a.command, b.command)
	})
	return out
}

// scriptRuns is the script calls (EVALSHA, EVAL, FCALL) per request among cs.
func scriptRuns(cs []cmdStat) float64 {
	var x float64
	for _, c := range cs {
		switch c.command {
		case "evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro":
			x += c.callsPerReq
		}
	}
	return x
}

// totalCalls is every command's calls per request among cs (a script's own
// commands count beside its EVALSHA, as Redis counts them).
func totalCalls(cs []cmdStat) float64 {
	var x float64
	for _, c := range cs {
		x += c.callsPerReq
	}
	return x
}

// formatCommands is "evalsha 0.12/req 3.1us/req, zadd 1.00/req ..." for the
// commands called at least once per 1,000 requests.
func formatCommands(cs []cmdStat, sep string) string {
	var parts []string
	for _, c := range cs {
		if c.callsPerReq < 0.001 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.3f/req %.1fus/req", c.command, c.callsPerReq, c.usecPerReq))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, sep)
}

// Command openloop measures latency at a fixed request rate well below
// saturation, the way a service sees it: requests are sent on a fixed
// schedule whatever the answers do (open loop), and each latency is measured
// from the time the request was SCHEDULED, not from when it was actually
// sent. A closed-loop tool (wrk) waits for an answer before sending the next
// request, so a stall delays the requests that would have waited behind it
// and they are never measured (coordinated omission); here they are.
//
//	openloop -target go-plain=http://127.0.0.1:28101 -target fenceproxy=http://127.0.0.1:28104 \
//	         -rate 1000 -duration 15s -rounds 3 -warmup 2s -baseline go-plain -subject fenceproxy
//
// Targets are interleaved: each of -rounds rounds runs every target alone for
// duration/rounds in turn, and each target's samples are pooled over the
// rounds. Then the -paired targets (go-plain and fenceproxy by default) run
// at the same time, sharing -rate, their requests alternating: on a machine
// shared with other loads, both then meet the same bursts of a neighbour's
// CPU use, which makes the difference of their p99s the fairest estimate of
// the latency one adds over the other. Both runs are cut into segments
// (rounds); besides all of them, each is also summarised over only its
// quiet segments, those in which the generator itself sent on time
// (-quiet-lag), for the baseline and the subject alike. Every request is PUT /r/<key-prefix><n> (n cycles over -keys) with a
// 20-byte body and a Fencing-Token from one process-wide counter that starts
// at the current Unix time in nanoseconds, so every token is fresh.
//
// Output: a table on stderr, one "openloop[...]:" line on stdout, and with
// -out a TSV row per target.
//
// The load is vegeta's (github.com/tsenart/vegeta/v12/lib): a vegeta.Attacker
// per run with a Targeter that builds each PUT, sharing one http.Client (so
// the connections carry over from run to run), and vegeta.Metrics for the
// latency percentiles (t-digest estimates; max is exact). What vegeta cannot
// do, and this file therefore adds (the custom code is only this):
//
//   - Latency from the scheduled send time. vegeta measures each request from
//     the moment a worker starts it (Result.Timestamp), so the generator's own
//     lateness is invisible to it. Here the pacer records when the attack
//     began, request n (Result.Seq) was due at began+(n+1)*interval (vegeta's
//     ConstantPacer schedule), its send lag is Timestamp minus that, and the
//     lag is added to Result.Latency before the Metrics see it.
//   - Sending on time. vegeta's attack loop waits with time.Sleep, which Go's
//     timers serve with about a millisecond of granularity (the netpoller's
//     wait is in whole milliseconds): measured on the benchmark's VM at 1,000
//     req/s, its sends were 0.6-0.8 ms late at the median, against about 0.2 ms
//     with nanosleep(2), on a benchmark whose goal is 1 ms of added p99 and
//     whose quiet segments are those with a send-lag p99 under 1 ms. So the
//     pacer (a vegeta.Pacer: vegeta.ConstantPacer's schedule) sleeps until each
//     request is due with nanosleep, which the kernel's high-resolution timers
//     honour to tens of microseconds without spinning a CPU, and hands vegeta
//     a wait of zero; it also stops the attack after exactly rate x duration
//     requests.
//   - The send lag's own p99 (a vegeta.LatencyMetrics of the lags), and the
//     split of failures into non-2xx answers and requests without an answer:
//     vegeta's Success and Errors count 4xx/5xx and transport errors alike
//     and 3xx as success.
//   - Everything about the benchmark rather than the load: interleaved rounds,
//     the simultaneous pair (one attack alternating its targets, results told
//     apart by URL), the quiet-segment selection, and the table, summary line
//     and TSV that bench/openloop.sh and cmd/report read.
//
// vegeta adds an X-Vegeta-Seq header to every request; the proxies forward it.
package main

import (
	"flag"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

type targetFlag []target

type target struct{ name, url string }

func (t *targetFlag) String() string { return fmt.Sprint(*t) }
func (t *targetFlag) Set(v string) error {
	name, url, ok := strings.Cut(v, "=")
	if !ok || name == "" || !strings.HasPrefix(url, "http://") {
		return fmt.Errorf("want name=http://host:port, got %q", v)
	}
	*t = append(*t, target{name, strings.TrimRight(url, "/")})
	return nil
}

// sample is one request: vegeta's result with Latency counted from the
// scheduled send time, and lag, how late the request started (already
// inside Latency).
type sample struct {
	res *vegeta.Result
	lag time.Duration
}

var payload = []byte("twenty-byte-payload\n")

func main() {
	var targets targetFlag
	flag.Var(&targets, "target", "name=url to measure; repeat, in the order to interleave")
	rate := flag.Float64("rate", 1000, "requests per second, each target")
	duration := flag.Duration("duration", 15*time.Second, "measured time per target, split over the rounds")
	rounds := flag.Int("rounds", 15, "interleaved rounds")
	warmup := flag.Duration("warmup", 2*time.Second, "unmeasured time per target at the same rate, before the first round")
	paired := flag.String("paired", "go-plain,fenceproxy", "after the rounds, drive these targets at the same time, so both meet the same noise; empty: skip")
	pairedDuration := flag.Duration("paired-duration", 20*time.Second, "length of the simultaneous run")
	pairedRounds := flag.Int("paired-rounds", 20, "the simultaneous run is cut into this many segments (for -quiet-lag)")
	pairedRate := flag.Float64("paired-rate", 0, "requests per second, each paired target (default: -rate divided among them, so the machine carries the same total rate as in the interleaved runs)")
	quietLag := flag.Duration("quiet-lag", time.Millisecond, "a segment is quiet when the generator's own send-lag p99 stayed at or below this")
	keys := flag.Int("keys", 1000, "resources cycled through")
	keyPrefix := flag.String("key-prefix", "o", "paths are /r/<key-prefix><n>")
	header := flag.String("header", "Fencing-Token", "token header")
	timeout := flag.Duration("timeout", 5*time.Second, "per-request timeout (a timed-out request counts with its full wait)")
	label := flag.String("label", "", "label of the summary line, e.g. redis=none")
	baseline := flag.String("baseline", "go-plain", "target the added latency is measured against")
	subject := flag.String("subject", "fenceproxy", "target whose added latency is reported")
	goal := flag.Duration("goal", time.Millisecond, "added p99 the subject may have over the baseline")
	out := flag.String("out", "", "append one TSV row per target and mode here")
	flag.Parse()
	if len(targets) == 0 || *rate <= 0 || *rounds < 1 || *duration <= 0 || *keys < 1 || *pairedRounds < 1 {
		flag.Usage()
		os.Exit(2)
	}
	byName := map[string]target{}
	var names []string
	for _, t := range targets {
		byName[t.name] = t
		names = append(names, t.name)
	}
	var pair []target
	if *paired != "" {
		for _, name := range strings.Split(*paired, ",") {
			t, ok := byName[name]
			if !ok {
				fmt.Fprintf(os.Stderr, "openloop: -paired names %q, which is not a -target\n", name)
				os.Exit(2)
			}
			pair = append(pair, t)
		}
	}
	var pairNames []string // the two the added latency is about
	if _, ok := byName[*baseline]; ok {
		if _, ok := byName[*subject]; ok {
			pairNames = []string{*baseline, *subject}
		}
	}

	transport := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	gen := &generator{
		client: &http.Client{Transport: transport, Timeout: *timeout},
		header: *header, keys: *keys, keyPrefix: *keyPrefix,
	}
	gen.token.Store(uint64(time.Now().UnixNano()))

	for _, t := range targets {
		fmt.Fprintf(os.Stderr, "warm-up %s %v at %.0f/s\n", t.name, *warmup, *rate)
		gen.run([]target{t}, *rate, *warmup)
	}

	// Interleaved: round after round, each target alone for duration/rounds.
	per := *duration / time.Duration(*rounds)
	var interSegs []segment
	for r := 1; r <= *rounds; r++ {
		seg := segment{}
		for _, t := range targets {
			seg[t.name] = gen.run([]target{t}, *rate, per)[0]
			st := describe(seg[t.name])
			fmt.Fprintf(os.Stderr, "  round %2d %-10s n=%d p50=%.3fms p99=%.3fms max=%.3fms send-lag p99=%.3fms non2xx=%d errors=%d\n",
				r, t.name, st.n, ms(st.p50), ms(st.p99), ms(st.max), ms(st.lagP99), st.non2xx, st.errors)
		}
		interSegs = append(interSegs, seg)
	}
	results := []result{{mode: "interleaved", rate: *rate, dur: *duration, names: names, all: pool(interSegs, names)}}
	if pairNames != nil {
		q := quietOnly(interSegs, pairNames, *quietLag)
		results = append(results, result{mode: "interleaved-quiet", rate: *rate, dur: *duration, names: pairNames,
			all: pool(q, pairNames), segments: fmt.Sprintf("%d/%d", len(q), len(interSegs))})
	}

	// Simultaneous: the pair at once, their requests alternating.
	if len(pair) > 0 {
		if *pairedRate <= 0 {
			*pairedRate = *rate / float64(len(pair))
		}
		var pn []string
		for _, t := range pair {
			pn = append(pn, t.name)
		}
		fmt.Fprintf(os.Stderr, "simultaneous: %s at once, each at %.0f req/s, %v\n", *paired, *pairedRate, *pairedDuration)
		var segs []segment
		for range *pairedRounds {
			res := gen.run(pair, *pairedRate, *pairedDuration/time.Duration(*pairedRounds))
			seg := segment{}
			for i, t := range pair {
				seg[t.name] = res[i]
			}
			segs = append(segs, seg)
		}
		results = append(results, result{mode: "simultaneous", rate: *pairedRate, dur: *pairedDuration, names: pn, all: pool(segs, pn)})
		q := quietOnly(segs, pn, *quietLag)
		results = append(results, result{mode: "simultaneous-quiet", rate: *pairedRate, dur: *pairedDuration, names: pn,
			all: pool(q, pn), segments: fmt.Sprintf("%d/%d", len(q), len(segs))})
	}
	for _, r := range results {
		title := fmt.Sprintf("%s: %.0f req/s per target, %v", r.mode, r.rate, r.dur)
		if r.segments != "" {
			title += fmt.Sprintf(", only the %s segments whose send-lag p99 stayed <= %v for all of %s", r.segments, *quietLag, strings.Join(r.names, " and "))
		}
		printTable(title, r.names, r.all)
	}

	var line strings.Builder
	fmt.Fprintf(&line, "openloop[%s]: %.0freq/s x %v per target |", *label, *rate, *duration)
	inter := results[0].all
	var non2xx, errs int
	for _, t := range targets {
		st := inter[t.name]
		fmt.Fprintf(&line, " %s p50=%.2fms p90=%.2fms p99=%.2fms max=%.2fms", t.name, ms(st.p50), ms(st.p90), ms(st.p99), ms(st.max))
	}
	for _, r := range results {
		if strings.HasSuffix(r.mode, "-quiet") {
			continue // their samples are counted in the unfiltered modes already
		}
		for _, st := range r.all {
			non2xx += st.non2xx
			errs += st.errors
		}
	}
	if pairNames != nil {
		fmt.Fprintf(&line, " | %s p99 over %s (goal <= %v):", *subject, *baseline, *goal)
		sep := " "
		for _, r := range results {
			b, okB := r.all[*baseline]
			s, okS := r.all[*subject]
			if !okB || !okS {
				continue
			}
			added := s.p99 - b.p99
			v := "ok"
			if added > *goal {
				v = "MISSED"
			}
			if s.n == 0 || b.n == 0 {
				v = "n/a"
			}
			fmt.Fprintf(&line, "%s%s %+.2fms %s", sep, r.mode, ms(added), v)
			if r.segments != "" {
				fmt.Fprintf(&line, " (%s)", r.segments)
			}
			sep = ", "
		}
	}
	fmt.Fprintf(&line, " | non2xx=%d errors=%d", non2xx, errs)
	fmt.Println(line.String())

	if *out != "" {
		for _, r := range results {
			if err := writeTSV(*out, *label, r); err != nil {
				fmt.Fprintln(os.Stderr, "openloop:", err)
				os.Exit(1)
			}
		}
	}
	if non2xx+errs > 0 {
		for _, r := range results {
			for name, st := range r.all {
				if st.non2xx+st.errors > 0 {
					fmt.Fprintf(os.Stderr, "openloop: %s %s: requests by status %v (0: no answer, %d of them)\n", r.mode, name, st.statuses, st.errors)
				}
			}
		}
	}
}

// segment is one stretch of load: the samples of each target driven in it.
type segment map[string][]sample

// result is one way of looking at the samples of a run.
type result struct {
	mode     string // interleaved, simultaneous, and their -quiet selections
	rate     float64
	dur      time.Duration
	names    []string
	all      map[string]summary
	segments string // "kept/total" for a -quiet selection
}

// pool summarises each named target over the segments, with the p99 of
// every segment kept in roundP99.
func pool(segs []segment, names []string) map[string]summary {
	out := map[string]summary{}
	for _, n := range names {
		var all []sample
		var rp []time.Duration
		for _, seg := range segs {
			all = append(all, seg[n]...)
			rp = append(rp, describe(seg[n]).p99)
		}
		st := describe(all)
		st.roundP99 = rp
		out[n] = st
	}
	return out
}

// quietOnly keeps the segments in which, for every named target, the
// generator sent its requests on time (send-lag p99 <= limit): a neighbour's
// burst of CPU use that delays the generator delays the proxies too, and
// dropping those stretches for both targets alike leaves what the proxies
// themselves add. It is a selection, so the doc reports it beside, never
// instead of, the unfiltered figures.
func quietOnly(segs []segment, names []string, limit time.Duration) []segment {
	var out []segment
	for _, seg := range segs {
		ok := true
		for _, n := range names {
			if describe(seg[n]).lagP99 > limit {
				ok = false
			}
		}
		if ok {
			out = append(out, seg)
		}
	}
	return out
}

func printTable(title string, names []string, all map[string]summary) {
	fmt.Fprintf(os.Stderr, "%s; latency from the scheduled send time:\n", title)
	fmt.Fprintf(os.Stderr, "  %-10s %7s %8s %8s %8s %9s %8s %7s %6s %12s\n", "target", "n", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms", "non2xx", "errors", "send-lag p99")
	for _, n := range names {
		st := all[n]
		fmt.Fprintf(os.Stderr, "  %-10s %7d %8.3f %8.3f %8.3f %9.3f %8.3f %7d %6d %10.3fms\n", n, st.n,
			ms(st.p50), ms(st.p90), ms(st.p99), ms(st.p999), ms(st.max), st.non2xx, st.errors, ms(st.lagP99))
	}
}

type generator struct {
	client    *http.Client
	header    string
	keys      int
	keyPrefix string
	token     atomic.Uint64
	next      atomic.Uint64 // key cursor
}

// run drives every target at rate requests per second for d (with several
// targets, one attack at k times the rate whose requests take turns among
// them) and returns each target's samples once all requests have finished.
func (g *generator) run(targets []target, rate float64, d time.Duration) [][]sample {
	k := len(targets)
	n := uint64(math.Round(rate*d.Seconds())) * uint64(k)
	interval := time.Duration(float64(time.Second) / rate / float64(k))
	p := &pacer{ConstantPacer: vegeta.ConstantPacer{Freq: 1, Per: interval}, hits: n}
	var turn atomic.Uint64
	tr := func(t *vegeta.Target) error {
		key := g.next.Add(1) % uint64(g.keys)
		t.Method = http.MethodPut
		t.URL = targets[(turn.Add(1)-1)%uint64(k)].url + "/r/" + g.keyPrefix + strconv.FormatUint(key, 10)
		t.Body = payload
		t.Header = http.Header{
			g.header:       {strconv.FormatUint(g.token.Add(1), 10)},
			"Content-Type": {"application/octet-stream"},
		}
		return nil
	}
	samples := make([][]sample, k)
	atk := vegeta.NewAttacker(vegeta.Client(g.client), vegeta.MaxBody(0))
	for res := range atk.Attack(tr, p, 0, "") {
		due := p.began.Add(time.Duration(res.Seq+1) * interval)
		lag := max(0, res.Timestamp.Sub(due))
		res.Latency += lag
		for i, t := range targets {
			if strings.HasPrefix(res.URL, t.url+"/") {
				samples[i] = append(samples[i], sample{res: res, lag: lag})
				break
			}
		}
	}
	return samples
}

// pacer is vegeta.ConstantPacer's schedule (request n due at
// (n+1)*Per after the attack began) kept with nanosleep(2) instead of the
// attack loop's time.Sleep, stopping after hits requests. It remembers when
// the attack began, for the send lags.
type pacer struct {
	vegeta.ConstantPacer
	hits  uint64
	began time.Time
}

func (p *pacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if p.began.IsZero() {
		p.began = time.Now().Add(-elapsed)
	}
	if hits >= p.hits {
		return 0, true
	}
	wait, stop := p.ConstantPacer.Pace(elapsed, hits)
	if wait > 0 {
		ts := syscall.NsecToTimespec(int64(wait))
		for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
		}
	}
	return 0, stop
}

type summary struct {
	n                        int
	p50, p90, p99, p999, max time.Duration
	lagP99                   time.Duration
	non2xx, errors           int
	roundP99                 []time.Duration
	statuses                 map[string]int // by status code, "0": no answer
}

// describe summarises samples with vegeta's Metrics. A request that failed
// counts with the time it waited, so a target that times out cannot look fast.
func describe(s []sample) summary {
	if len(s) == 0 {
		return summary{}
	}
	var m vegeta.Metrics
	var lag vegeta.LatencyMetrics
	var st summary
	for _, x := range s {
		m.Add(x.res)
		lag.Add(x.lag)
		switch {
		case x.res.Code == 0:
			st.errors++
		case x.res.Code < 200 || x.res.Code > 299:
			st.non2xx++
		}
	}
	m.Close()
	st.n = int(m.Requests)
	st.p50, st.p90, st.p99, st.p999, st.max = m.Latencies.P50, m.Latencies.P90, m.Latencies.P99, m.Latencies.Quantile(0.999), m.Latencies.Max
	st.lagP99 = lag.Quantile(0.99)
	st.statuses = m.StatusCodes
	return st
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func writeTSV(path, label string, r result) error {
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if statErr != nil {
		fmt.Fprintln(f, "label\tmode\ttarget\trate\tseconds\tsegments\trequests\tp50_us\tp90_us\tp99_us\tp999_us\tmax_us\tnon2xx\terrors\tsend_lag_p99_us\tround_p99_us")
	}
	us := func(d time.Duration) int64 { return d.Microseconds() }
	segs := r.segments
	if segs == "" {
		segs = "-"
	}
	for _, n := range r.names {
		st := r.all[n]
		var rp []string
		for _, p := range st.roundP99 {
			rp = append(rp, strconv.FormatInt(us(p), 10))
		}
		fmt.Fprintf(f, "%s\t%s\t%s\t%.0f\t%.0f\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", label, r.mode, n, r.rate, r.dur.Seconds(), segs, st.n,
			us(st.p50), us(st.p90), us(st.p99), us(st.p999), us(st.max), st.non2xx, st.errors, us(st.lagP99), strings.Join(rp, ","))
	}
	return f.Close()
}

// Command drainwake measures the wait the drain barrier costs a newer
// generation once the older request it waits for has completed: how long
// after the older request's answer the newer request's answer arrives.
//
//	drainwake -target fenceproxy=http://127.0.0.1:28104 -target fenceproxy-nodrain=http://127.0.0.1:28107 \
//	          -n 100 -hold 20ms -gap 5ms -label redis=none -out drainwake.tsv
//
// For each of -n iterations and each target, on a resource of its own:
//
//  1. a lone PUT with a fresh token (its latency: what one request through
//     the proxy costs on this machine at this moment, the "lone" column);
//  2. the older request: PUT with token T and "Bench-Hold: <hold>", which
//     bench/cmd/origin answers only after that long;
//  3. -gap later, while the older one is held in the origin, the newer
//     request: PUT with token T+1 and no hold. With the barrier on, the
//     proxy admits it (T+1 is above the mark) and then holds it until the
//     older request is no longer in flight.
//
// after-older = (end of the newer answer) − (end of the older answer): the
// release of the older request's flight, the wake of the waiting request,
// its check, and its own trip through proxy and origin (about "lone" minus
// the admission). Its median is what the goal "a newer generation waits
// under 5 ms after an older request completes" is about, measured from the
// client, so it is an upper bound. A newer answer that arrives before the
// older one "overtook" it, as the client saw it (expected with
// FENCE_DRAIN=off; with it on, the client's reading of the older answer
// was only later than the newer one's, which a busy machine can do). The
// origin says whether the newer request reached it while it still held
// the older one ("Bench-Overlap"): "overlapped", the race the barrier
// exists to close, expected with FENCE_DRAIN=off and a failure with it on.
// An older request refused with 409 was admitted after the newer one (the
// gap was too short on a busy machine): "reordered", not measured.
//
// Output: a table on stderr, one "drain-wake[LABEL]:" line on stdout, and
// with -out a TSV row per target.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
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

var payload = []byte("twenty-byte-payload\n")

// result is one target's measurement.
type result struct {
	name                                     string
	n                                        int
	afterOlder, lone                         []time.Duration
	overtook, overlapped, reordered, errored int
}

func main() {
	var targets targetFlag
	flag.Var(&targets, "target", "name=url of a fenceproxy to measure; repeat")
	n := flag.Int("n", 100, "iterations per target")
	hold := flag.Duration("hold", 20*time.Millisecond, "how long the origin holds the older request")
	gap := flag.Duration("gap", 5*time.Millisecond, "time between sending the older and the newer request")
	label := flag.String("label", "", "label of the output line (e.g. redis=none)")
	prefix := flag.String("path", "/r/wake", "path prefix of the resources (each iteration uses its own)")
	out := flag.String("out", "", "TSV file to append one row per target to")
	flag.Parse()
	if len(targets) == 0 || *n <= 0 || *gap >= *hold {
		fmt.Fprintln(os.Stderr, "drainwake: need -target, -n > 0 and -gap < -hold")
		os.Exit(2)
	}
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 8, DisableCompression: true},
	}
	run := time.Now().UnixNano()
	var results []result
	for _, t := range targets {
		results = append(results, measure(client, t, *n, *hold, *gap, fmt.Sprintf("%s-%d", *prefix, run)))
	}
	fmt.Fprintf(os.Stderr, "drain wake (%s): older held %v in the origin, newer sent %v after it, %d iterations\n", *label, *hold, *gap, *n)
	fmt.Fprintf(os.Stderr, "  %-20s %9s %9s %9s %9s %11s %8s %10s %9s %6s\n", "target", "p50 ms", "p90 ms", "p99 ms", "max ms", "lone p50", "overtook", "overlapped", "reordered", "errors")
	var line strings.Builder
	fmt.Fprintf(&line, "drain-wake[%s]: hold=%v gap=%v", *label, *hold, *gap)
	for i, r := range results {
		p50, p90, p99, mx := pct(r.afterOlder, 50), pct(r.afterOlder, 90), pct(r.afterOlder, 99), pct(r.afterOlder, 100)
		lone := pct(r.lone, 50)
		fmt.Fprintf(os.Stderr, "  %-20s %9s %9s %9s %9s %11s %8d %10d %9d %6d\n", r.name, ms(p50), ms(p90), ms(p99), ms(mx), ms(lone), r.overtook, r.overlapped, r.reordered, r.errored)
		if i > 0 {
			line.WriteString(" |")
		}
		fmt.Fprintf(&line, " %s n=%d after-older p50=%sms p90=%sms p99=%sms max=%sms measured=%d lone-p50=%sms overtook=%d overlapped=%d reordered=%d errors=%d",
			r.name, r.n, ms(p50), ms(p90), ms(p99), ms(mx), len(r.afterOlder), ms(lone), r.overtook, r.overlapped, r.reordered, r.errored)
		if *out != "" {
			if err := appendRow(*out, *label, r, *hold, *gap); err != nil {
				fmt.Fprintln(os.Stderr, "drainwake:", err)
				os.Exit(1)
			}
		}
	}
	fmt.Println(line.String())
}

func measure(client *http.Client, t target, n int, hold, gap time.Duration, prefix string) result {
	r := result{name: t.name, n: n}
	for i := range n {
		base := uint64(time.Now().UnixNano())
		path := fmt.Sprintf("%s/%s-%d", t.url, prefix, i)
		// the lone request, on a resource of its own
		if st, end, start, _ := put(client, path+"-lone", base, 0); st == http.StatusOK {
			r.lone = append(r.lone, end.Sub(start))
		} else {
			r.errored++
			continue
		}
		var wg sync.WaitGroup
		var olderStatus int
		var olderEnd time.Time
		wg.Go(func() { olderStatus, olderEnd, _, _ = put(client, path, base, hold) })
		time.Sleep(gap)
		newerStatus, newerEnd, _, overlap := put(client, path, base+1, -1)
		wg.Wait()
		switch {
		case olderStatus == http.StatusConflict && newerStatus == http.StatusOK:
			r.reordered++
			continue
		case olderStatus != http.StatusOK || newerStatus != http.StatusOK:
			r.errored++
			continue
		}
		if overlap {
			r.overlapped++
		}
		if newerEnd.Before(olderEnd) {
			r.overtook++
		} else {
			r.afterOlder = append(r.afterOlder, newerEnd.Sub(olderEnd))
		}
	}
	return r
}

// put sends one fenced PUT and reads the whole answer; it returns the
// status (0 on a transport error), when the answer ended, when it began,
// and whether the origin said it arrived while an older request of its
// path was held. hold > 0 asks the origin to hold it; hold < 0 asks the
// origin whether it overlapped a held one.
func put(client *http.Client, url string, token uint64, hold time.Duration) (int, time.Time, time.Time, bool) {
	req, err := http.NewRequest(http.MethodPut, url, bytes.NewReader(payload))
	if err != nil {
		return 0, time.Now(), time.Now(), false
	}
	req.Header.Set("Fencing-Token", strconv.FormatUint(token, 10))
	req.Header.Set("Content-Type", "application/octet-stream")
	if hold > 0 {
		req.Header.Set("Bench-Hold", hold.String())
	} else if hold < 0 {
		req.Header.Set("Bench-Probe", "1")
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, time.Now(), start, false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, time.Now(), start, resp.Header.Get("Bench-Overlap") == "1"
}

// pct is the p-th percentile (nearest rank) of ds, NaN-like -1 when empty.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return -1
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func ms(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64)
}

func us(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return strconv.FormatInt(d.Microseconds(), 10)
}

const header = "label\ttarget\tn\thold_ms\tgap_ms\tmeasured\tafter_older_p50_us\tafter_older_p90_us\tafter_older_p99_us\tafter_older_max_us\tlone_p50_us\tovertook\treordered\terrors\toverlapped\n"

func appendRow(path, label string, r result, hold, gap time.Duration) error {
	st, err := os.Stat(path)
	f, ferr := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if ferr != nil {
		return ferr
	}
	defer f.Close()
	if err != nil || st.Size() == 0 {
		if _, err := f.WriteString(header); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(f, "%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\n", label, r.name, r.n,
		ms(hold), ms(gap), len(r.afterOlder), us(pct(r.afterOlder, 50)), us(pct(r.afterOlder, 90)), us(pct(r.afterOlder, 99)),
		us(pct(r.afterOlder, 100)), us(pct(r.lone, 50)), r.overtook, r.reordered, r.errored, r.overlapped)
	return err
}

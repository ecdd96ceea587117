package harness

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenceproxy/fenceproxy/faults/check"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// herd: many waiters on one resource. No load, no mark reader. Per phase,
// n writers (1, 10, then 100) write to a resource of the phase's own in
// rounds for herdFor: in a round the writers send one request each, with
// tokens rising in the order they are sent (each a new lease), herdGap
// apart; the first one's service works long enough for all the others to
// be admitted and queue behind it at the barrier, each of the others for
// herdWork. So n-1 waiters wait on one resource, each for the ones admitted
// before it. Redis counts the commands it ran (INFO stats
// total_commands_processed, which counts the commands a script runs too)
// and its CPU (INFO cpu) over each phase; the figure is commands per
// request the store decided (admitted or refused), against the one
// writer's. A release that wakes every waiter, each of which asks the store
// again, makes it grow with the writers; a wake of only the waiters a
// release may unblock keeps it flat. The scenario fails when the 100
// writers' figure is above herdRatio times the one writer's (on the proxy
// before the targeted wake-up it was about 12 times, docs/faults.md). Its
// control, "broadcast", runs proxies whose every release wakes every
// waiter, each of which asks the store again (harness.go).

const (
	herdWork  = 2 * time.Millisecond
	herdGap   = 3 * time.Millisecond
	herdRatio = 2.0
)

var herdWriters = []int{1, 10, 100}

// herdPhase is what one phase measured.
type herdPhase struct {
	writers            int
	admitted, refused  int
	other              int
	commands           float64
	cpu                time.Duration // Redis's user and system CPU
	perDecided, perAdm float64
	cpuPerAdm          time.Duration
	problem            string
}

func herd(ctx context.Context, e *env) error {
	if err := e.sleep(ctx, e.p.warmup/2); err != nil {
		return err
	}
	herdFor := e.p.slowFor / 2
	for _, n := range herdWriters {
		ph, err := e.herdPhase(ctx, n, herdFor)
		if err != nil {
			return err
		}
		e.mu.Lock()
		e.herd = append(e.herd, ph)
		e.mu.Unlock()
		e.logf("%d writers: %d admitted, %d refused, %.0f commands (%.2f per decided request), Redis CPU %v", n, ph.admitted, ph.refused, ph.commands, ph.perDecided, ph.cpu)
	}
	e.recovered = 0
	return nil
}

// redisCounters reads the commands Redis processed and the CPU it used.
func (e *env) redisCounters() (float64, time.Duration, error) {
	st, err := redistest.Info(e.master.Addr(), nil, "stats")
	if err != nil {
		return 0, 0, err
	}
	cpu, err := redistest.Info(e.master.Addr(), nil, "cpu")
	if err != nil {
		return 0, 0, err
	}
	n, err := strconv.ParseFloat(st["total_commands_processed"], 64)
	if err != nil {
		return 0, 0, fmt.Errorf("total_commands_processed %q", st["total_commands_processed"])
	}
	u, _ := strconv.ParseFloat(cpu["used_cpu_user"], 64)
	s, _ := strconv.ParseFloat(cpu["used_cpu_sys"], 64)
	return n, secs(u + s), nil
}

func (e *env) herdPhase(ctx context.Context, n int, d time.Duration) (herdPhase, error) {
	ph := herdPhase{writers: n}
	res := fmt.Sprintf("herd-%d", n)
	var tok atomic.Uint64
	tok.Store(1000)
	c0, cpu0, err := e.redisCounters()
	if err != nil {
		return ph, err
	}
	deadline := time.Now().Add(d)
	var ops []check.Op
	clients := make([]*http.Client, n)
	for w := range clients {
		clients[w] = newClient()
		defer clients[w].CloseIdleConnections()
	}
	// The first request of a round is held until every other one has been
	// sent and admitted (they queue behind it); with one writer there is
	// nobody to queue, and the round is one plain request.
	hold := herdWork
	if n > 1 {
		hold = time.Duration(n)*herdGap + 200*time.Millisecond
	}
	for round := 0; time.Now().Before(deadline) && ctx.Err() == nil; round++ {
		batch := make([]check.Op, n)
		var wg sync.WaitGroup
		for w := range n {
			batch[w] = check.Op{ID: fmt.Sprintf("%s-%s-%d-%d", e.sc.name, res, round, w), Client: 1000*n + w,
				Replica: w % 2, Resource: res, Token: tok.Add(1)}
			work := herdWork
			if w == 0 {
				work = hold
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				e.ld.doWith(clients[w], &batch[w], reqOpts{work: work})
			}()
			if n > 1 {
				time.Sleep(herdGap)
			}
		}
		wg.Wait()
		ops = append(ops, batch...)
	}
	c1, cpu1, err := e.redisCounters()
	if err != nil {
		return ph, err
	}
	for i := range ops {
		switch ops[i].Outcome {
		case check.Admitted:
			ph.admitted++
		case check.Stale:
			ph.refused++
		default:
			ph.other++
		}
	}
	ph.commands, ph.cpu = c1-c0, cpu1-cpu0
	if dec := ph.admitted + ph.refused; dec > 0 {
		ph.perDecided = ph.commands / float64(dec)
	}
	if ph.admitted > 0 {
		ph.perAdm = ph.commands / float64(ph.admitted)
		ph.cpuPerAdm = ph.cpu / time.Duration(ph.admitted)
	} else {
		ph.problem = fmt.Sprintf("%d writers: nothing admitted", n)
	}
	e.addOps(ops...)
	return ph, nil
}

// judgeHerd: every phase admitted requests; the most writers' commands per
// decided request within herdRatio of the one writer's.
func judgeHerd(e *env, _ []check.Op, res *Result) {
	if len(e.herd) != len(herdWriters) {
		res.Problems = append(res.Problems, fmt.Sprintf("%d of %d phases ran", len(e.herd), len(herdWriters)))
		return
	}
	for _, ph := range e.herd {
		if ph.problem != "" {
			res.Problems = append(res.Problems, ph.problem)
		}
	}
	one, most := e.herd[0], e.herd[len(e.herd)-1]
	if one.perDecided > 0 && most.perDecided > herdRatio*one.perDecided {
		res.Violations = append(res.Violations, fmt.Sprintf("herd: %d writers on one resource cost %.2f store commands per decided request, %.1f times the one writer's %.2f (at most %.0fx): the store is asked again for waiters a release cannot unblock",
			most.writers, most.perDecided, most.perDecided/one.perDecided, one.perDecided, herdRatio))
	}
}

// herdFields: per phase (comma lists, in the order of herdWriters) the
// admitted and refused requests, Redis's commands per decided and per
// admitted request, and its CPU per admitted request; then the ratio the
// scenario judges.
func herdFields(e *env, _ []check.Op, _ *check.Report) []string {
	var w, adm, ref, perDec, perAdm, cpu []string
	for _, ph := range e.herd {
		w = append(w, strconv.Itoa(ph.writers))
		adm = append(adm, strconv.Itoa(ph.admitted))
		ref = append(ref, strconv.Itoa(ph.refused))
		perDec = append(perDec, fmt.Sprintf("%.2f", ph.perDecided))
		perAdm = append(perAdm, fmt.Sprintf("%.2f", ph.perAdm))
		cpu = append(cpu, ph.cpuPerAdm.Round(time.Microsecond).String())
	}
	ratio := "n/a"
	if n := len(e.herd); n > 1 && e.herd[0].perDecided > 0 {
		ratio = fmt.Sprintf("%.2f", e.herd[n-1].perDecided/e.herd[0].perDecided)
	}
	j := func(s []string) string { return strings.Join(s, ",") }
	return []string{fmt.Sprintf("writers=%s admitted_per_phase=%s refused_per_phase=%s commands_per_decided=%s commands_per_admitted=%s redis_cpu_per_admitted=%s herd_ratio=%s",
		j(w), j(adm), j(ref), j(perDec), j(perAdm), j(cpu), ratio)}
}

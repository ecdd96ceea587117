package harness

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/faults/check"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
	"github.com/fenceproxy/fenceproxy/internal/childproc"
)

// The injections. Each waits (warmup before the first fault, gap between
// faults), injects, recovers, records the fault's window, and ends with the
// cooldown, during which the load must be admitted again.

func (e *env) pause(ctx context.Context, round int) error {
	if round == 0 {
		return e.sleep(ctx, e.p.warmup)
	}
	return e.sleep(ctx, e.p.gap)
}

// redisKill: SIGKILL redis-server (AOF, appendfsync always) mid-load, keep it
// down for a second (503s), restart it on the same port and directory, and
// read the marks back at once.
func redisKill(ctx context.Context, e *env) error {
	for i := range e.p.rounds {
		if err := e.pause(ctx, i); err != nil {
			return err
		}
		start := e.now()
		pid := e.master.Pid()
		if err := e.master.Kill(); err != nil {
			return err
		}
		// What the crash left on disk, read before anything else can
		// write: a copy of the files, on a throwaway server.
		if e.rd != nil {
			cp, err := e.h.copyOf(e.master, fmt.Sprintf("crash%d", i))
			if err != nil {
				return err
			}
			reads, err := e.rd.snapshot(cp.Addr())
			cp.Term(time.Second)
			if err != nil {
				return err
			}
			e.checkpoint(start, reads)
		}
		if err := e.sleep(ctx, time.Second); err != nil {
			return err
		}
		if err := e.master.Restart(); err != nil {
			return err
		}
		if e.opts.Break == "nopersist" {
			// The one loss fenceproxy cannot notice: the store wiped and
			// every replica restarted with it, so no replica remembers the
			// identity record or a mark. (A replica that kept running would
			// refuse everything with 503 store-lost instead.)
			for _, r := range e.proxies {
				if err := r.Kill(); err != nil {
					return err
				}
				if err := r.Restart(); err != nil {
					return err
				}
			}
		}
		e.fault(start, -1)
		e.logf("SIGKILL redis-server pid %d, restarted as pid %d", pid, e.master.Pid())
	}
	return e.sleep(ctx, e.p.cooldown)
}

// redisPause: SIGSTOP redis-server for three store timeouts, then SIGCONT.
// Redis then runs the commands queued in its sockets: admissions whose
// requests were answered 503 long ago may apply now (indeterminate 503s).
func redisPause(ctx context.Context, e *env) error {
	for i := range e.p.rounds {
		if err := e.pause(ctx, i); err != nil {
			return err
		}
		start := e.now()
		if err := e.master.Stop(); err != nil {
			return err
		}
		if _, err := childproc.WaitStopped(e.master.Pid(), 2*time.Second); err != nil {
			_ = e.master.Cont()
			return err
		}
		err := e.sleep(ctx, 3*e.p.storeTimeout)
		if cerr := e.master.Cont(); cerr != nil {
			return cerr
		}
		if err != nil {
			return err
		}
		e.fault(start, -1)
		e.logf("SIGSTOP redis-server pid %d for %v, SIGCONT", e.master.Pid(), 3*e.p.storeTimeout)
	}
	return e.sleep(ctx, e.p.cooldown)
}

// proxyKill: SIGKILL fenceproxy replica 1, keep it down for a second,
// restart it on the same ports.
func proxyKill(ctx context.Context, e *env) error {
	r := e.proxies[1]
	for i := range e.p.rounds {
		if err := e.pause(ctx, i); err != nil {
			return err
		}
		probe := e.startExpiryProbe(i)
		start := e.now()
		pid := r.Pid()
		if err := r.Kill(); err != nil {
			return err
		}
		e.faulted(probe)
		if err := e.sleep(ctx, time.Second); err != nil {
			return err
		}
		if err := r.Restart(); err != nil {
			return err
		}
		e.fault(start, 1)
		e.logf("SIGKILL fenceproxy1 pid %d, restarted as pid %d", pid, r.Pid())
		e.probeProblems = append(e.probeProblems, e.finish(probe, e.now(), false)...)
	}
	return e.sleep(ctx, e.p.cooldown)
}

// proxyPause: SIGSTOP fenceproxy replica 1 for four store timeouts, then
// SIGCONT. Its requests in flight complete afterwards: those it had not
// admitted yet are admitted or refused against the mark as it is then.
func proxyPause(ctx context.Context, e *env) error {
	r := e.proxies[1]
	for i := range e.p.rounds {
		if err := e.pause(ctx, i); err != nil {
			return err
		}
		probe := e.startExpiryProbe(i)
		start := e.now()
		if err := r.Stop(); err != nil {
			return err
		}
		took, err := childproc.WaitStopped(r.Pid(), 2*time.Second)
		if err != nil {
			_ = r.Cont()
			return err
		}
		e.faulted(probe)
		e.logf("fenceproxy1 stopped %v after SIGSTOP", took.Round(10*time.Microsecond))
		err = e.sleep(ctx, 4*e.p.storeTimeout)
		resumed := e.now()
		if cerr := r.Cont(); cerr != nil {
			return cerr
		}
		if err != nil {
			return err
		}
		e.fault(start, 1)
		e.logf("SIGSTOP fenceproxy1 pid %d for %v, SIGCONT", r.Pid(), 4*e.p.storeTimeout)
		e.probeProblems = append(e.probeProblems, e.finish(probe, resumed, true)...)
	}
	return e.sleep(ctx, e.p.cooldown)
}

// toxicPhase is one toxic held for a while on the proxies' link to Redis.
type toxicPhase struct {
	name, typ, stream string
	attrs             map[string]any
	hold              time.Duration
}

func (e *env) toxicPhases(ctx context.Context, phases []toxicPhase) error {
	n := 0
	for range e.p.rounds {
		for _, ph := range phases {
			if err := e.pause(ctx, n); err != nil {
				return err
			}
			n++
			start := e.now()
			if err := e.link.Add(ph.name, ph.typ, ph.stream, ph.attrs); err != nil {
				return err
			}
			err := e.sleep(ctx, ph.hold)
			if rerr := e.link.Remove(ph.name); rerr != nil {
				return rerr
			}
			if err != nil {
				return err
			}
			e.fault(start, -1)
			e.logf("toxic %s (%s %s %v) for %v", ph.name, ph.typ, ph.stream, ph.attrs, ph.hold)
		}
	}
	return e.sleep(ctx, e.p.cooldown)
}

// networkLatency: latency spikes of twice the store timeout on the requests
// (commands reach Redis after the proxy gave up: applied, answered 503), on
// the replies (applied at once, reply too late), then a 1 KB/s bandwidth
// limit on the replies.
func networkLatency(ctx context.Context, e *env) error {
	lat := map[string]any{"latency": (2 * e.p.storeTimeout).Milliseconds()}
	return e.toxicPhases(ctx, []toxicPhase{
		{name: "latency-up", typ: "latency", stream: "upstream", attrs: lat, hold: 1500 * time.Millisecond},
		{name: "latency-down", typ: "latency", stream: "downstream", attrs: lat, hold: 1500 * time.Millisecond},
		{name: "bandwidth", typ: "bandwidth", stream: "downstream", attrs: map[string]any{"rate": 1}, hold: 1500 * time.Millisecond},
	})
}

// networkReset: connections reset (RST) as soon as data flows, on the replies
// (Redis applied the admission) and on the requests (it never arrives).
func networkReset(ctx context.Context, e *env) error {
	rst := map[string]any{"timeout": 0}
	return e.toxicPhases(ctx, []toxicPhase{
		{name: "reset-down", typ: "reset_peer", stream: "downstream", attrs: rst, hold: time.Second},
		{name: "reset-up", typ: "reset_peer", stream: "upstream", attrs: rst, hold: time.Second},
	})
}

// networkCut: the link is cut (toxiproxy disabled: connections closed, new
// ones refused) and restored; then it black-holes (data in both directions
// dropped, connections left open, as a partition looks) and is restored.
func networkCut(ctx context.Context, e *env) error {
	for i := range e.p.rounds {
		if err := e.pause(ctx, 2*i); err != nil {
			return err
		}
		start := e.now()
		e.link.Disable()
		err := e.sleep(ctx, 1500*time.Millisecond)
		if eerr := e.link.Enable(); eerr != nil {
			return fmt.Errorf("toxiproxy enable: %w", eerr)
		}
		if err != nil {
			return err
		}
		e.fault(start, -1)
		e.logf("link cut for 1.5s, restored")

		if err := e.pause(ctx, 2*i+1); err != nil {
			return err
		}
		start = e.now()
		for _, s := range []string{"upstream", "downstream"} {
			if err := e.link.Add("blackhole-"+s, "timeout", s, map[string]any{"timeout": 0}); err != nil {
				return err
			}
		}
		err = e.sleep(ctx, 1500*time.Millisecond)
		for _, s := range []string{"upstream", "downstream"} {
			if rerr := e.link.Remove("blackhole-" + s); rerr != nil {
				return rerr
			}
		}
		if err != nil {
			return err
		}
		e.fault(start, -1)
		e.logf("link black-holed for 1.5s, restored")
	}
	return e.sleep(ctx, e.p.cooldown)
}

// replicationLag is the latency put on the replication link in the
// sentinel-failover-nowait measurement. Failover takes about
// down-after-milliseconds (1s) plus an election; whatever the replica had
// not received when it was promoted is lost.
const replicationLag = 2 * time.Second

// failover: SIGKILL the master and cut its replication link at the same
// moment (as a host crash loses the stream in flight); the sentinels promote
// the replica; the proxies follow. The marks are read from the new master
// at once. With
// acknowledgement on, the old master is restarted (AOF) and the sentinels
// turn it into a replica of the new one (MIN_REPLICAS=1 needs a replica to
// admit anything), and the next round kills the new master. Without
// acknowledgement, one round: the replica lags behind by replicationLag
// (toxiproxy latency on its link to the master).
func failover(ctx context.Context, e *env) error {
	rounds := e.p.rounds
	if e.sc.topo == sentinelNoWait {
		rounds = 1
		if err := e.replLink.Add("lag", "latency", "downstream", map[string]any{"latency": replicationLag.Milliseconds()}); err != nil {
			return err
		}
		e.note("replication_lag=%v", replicationLag)
		// Let the lag fill with admissions before the kill.
		if err := e.sleep(ctx, replicationLag); err != nil {
			return err
		}
	}
	for i := range rounds {
		if err := e.pause(ctx, i); err != nil {
			return err
		}
		old, next := e.master, e.replica
		if mi, err := redistest.Info(old.Addr(), nil, "replication"); err == nil {
			if ri, err := redistest.Info(next.Addr(), nil, "replication"); err == nil {
				e.logf("before the kill: master offset %s, replica offset %s", mi["master_repl_offset"], ri["slave_repl_offset"])
			}
		}
		start := e.now()
		pid := old.Pid()
		if err := old.Kill(); err != nil {
			return err
		}
		if i == 0 {
			// A host crash: what the replica had not received is gone
			// (the kernel of a killed process would still deliver it).
			// Later rounds kill a master whose replica is connected
			// directly (the sentinels configured it).
			e.replLink.Disable()
		}
		t0 := time.Now()
		// The replica's marks now, with its master gone: what the
		// sentinels will promote.
		if e.rd != nil {
			reads, err := e.rd.snapshot(next.Addr())
			if err != nil {
				return err
			}
			e.checkpoint(start, reads)
		}
		if err := e.sents.waitMaster(next.Addr(), 30*time.Second); err != nil {
			return err
		}
		promoted := time.Since(t0)
		if e.sc.topo == sentinelWait {
			if err := old.Restart(); err != nil {
				return err
			}
			// Sentinel converts a returning old master only after it has
			// reported its role for a while (8 s and an INFO round, every 10 s
			// for a replica), longer on a loaded machine: once a CI run
			// needed more than 30 s.
			err := waitFor(old.Proc, 60*time.Second, old.Name+" replicates "+next.Addr(), func() error {
				info, err := redistest.Info(old.Addr(), nil, "replication")
				if err != nil {
					return err
				}
				if info["role"] != "slave" || info["master_link_status"] != "up" ||
					info["master_port"] != fmt.Sprint(next.Port) {
					return fmt.Errorf("role %s link %s master_port %s", info["role"], info["master_link_status"], info["master_port"])
				}
				return redistest.WaitAcks(next.Addr())
			})
			if err != nil {
				return err
			}
		}
		e.master, e.replica = next, old
		e.fault(start, -1)
		e.logf("SIGKILL master %s pid %d; sentinels named %s after %v", old.Addr(), pid, next.Addr(),
			promoted.Round(time.Millisecond))
	}
	return e.sleep(ctx, e.p.cooldown)
}

// steadyLoad: no fault. After the warmup, the replicas' memory (and, with
// the drain barrier, their drain metrics) is sampled, the load runs for
// loadFor, and is sampled again.
func steadyLoad(ctx context.Context, e *env) error {
	if err := e.sleep(ctx, e.p.warmup); err != nil {
		return err
	}
	before, err := e.memory()
	if err != nil {
		return err
	}
	var drain [2]drainSample
	if !e.drainOff() {
		if drain[0], err = e.drainMetrics(); err != nil {
			return err
		}
	}
	t0 := e.now()
	if err := e.sleep(ctx, e.p.loadFor); err != nil {
		return err
	}
	t1 := e.now()
	after, err := e.memory()
	if err != nil {
		return err
	}
	if !e.drainOff() {
		if drain[1], err = e.drainMetrics(); err != nil {
			return err
		}
	}
	e.recovered = t0 // "after the last fault": the steady phase
	e.steady = [2]int64{t0, t1}
	e.mem = [2][]Memory{before, after}
	e.drain = drain
	return nil
}

func (e *env) memory() ([]Memory, error) {
	var out []Memory
	for _, r := range e.proxies {
		m, err := r.Memory()
		if err != nil {
			return nil, fmt.Errorf("%s memory: %w", r.Name, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// steadyRate is the load over the steady phase: writes, admitted writes,
// errors, and the latency of admitted writes.
type steadyRate struct {
	secs               float64
	ops, admitted      int
	errRate            float64
	p50, p99           time.Duration
	opsPerS, admPerS   float64
	workers, nReplicas int
}

func (e *env) steadyRate(ops []check.Op) steadyRate {
	var steady []check.Op
	for i := range ops {
		o := &ops[i]
		if o.Outcome != check.Read && o.Call >= e.steady[0] && o.Return <= e.steady[1] {
			steady = append(steady, *o)
		}
	}
	r := steadyRate{secs: time.Duration(e.steady[1] - e.steady[0]).Seconds(), ops: len(steady),
		workers: e.ld.cfg.Workers, nReplicas: len(e.proxies)}
	r.admitted = count(steady, func(o *check.Op) bool { return o.Outcome == check.Admitted })
	errs := count(steady, func(o *check.Op) bool { return o.Outcome == check.Unavailable || o.Outcome == check.Failed })
	if len(steady) > 0 {
		r.errRate = float64(errs) / float64(len(steady))
	}
	if r.secs > 0 {
		r.opsPerS, r.admPerS = float64(r.ops)/r.secs, float64(r.admitted)/r.secs
	}
	r.p50, r.p99 = latencies(steady)
	return r
}

func (r steadyRate) String() string {
	return fmt.Sprintf("workers=%d replicas=%d seconds=%.1f ops=%d ops_per_s=%.0f admitted=%d admitted_per_s=%.0f "+
		"error_rate=%.4f admitted_p50=%v admitted_p99=%v",
		r.workers, r.nReplicas, r.secs, r.ops, r.opsPerS, r.admitted, r.admPerS,
		r.errRate, r.p50.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond))
}

// loadMeasures is the measure=load line: throughput and errors over the
// steady phase, latency of admitted writes, the replicas' memory before and
// after; then the measure=load-drain line: the replicas' drain metrics
// over the steady phase (how admitted requests passed the barrier, and how
// long those that waited waited).
func loadMeasures(e *env, ops []check.Op, _ *check.Report) []string {
	if e.mem[0] == nil {
		return nil
	}
	list := func(f func(m Memory) int64, ms []Memory) string {
		s := make([]string, len(ms))
		for i, m := range ms {
			s[i] = fmt.Sprint(f(m))
		}
		return strings.Join(s, ",")
	}
	rss := func(m Memory) int64 { return m.RSSKiB }
	heap := func(m Memory) int64 { return m.HeapInuse >> 10 }
	gor := func(m Memory) int64 { return m.Goroutines }
	growth := make([]string, len(e.mem[0]))
	for i := range e.mem[0] {
		growth[i] = fmt.Sprintf("%+d", e.mem[1][i].RSSKiB-e.mem[0][i].RSSKiB)
	}
	out := []string{fmt.Sprintf("measure=load %v rss_kib_start=%s rss_kib_end=%s rss_growth_kib=%s "+
		"heap_inuse_kib_start=%s heap_inuse_kib_end=%s goroutines_start=%s goroutines_end=%s",
		e.steadyRate(ops),
		list(rss, e.mem[0]), list(rss, e.mem[1]), strings.Join(growth, ","),
		list(heap, e.mem[0]), list(heap, e.mem[1]), list(gor, e.mem[0]), list(gor, e.mem[1]))}
	if e.drain[1].outcomes != nil {
		out = append(out, fmt.Sprintf("measure=load-drain seconds=%.1f %s",
			time.Duration(e.steady[1]-e.steady[0]).Seconds(), drainFields(e.drain[1].add(e.drain[0], -1))))
	}
	return out
}

// drainOffFields are the load's figures without the barrier, for the
// measure=load-drain-off line (beside its inversions and overlaps).
func drainOffFields(e *env, ops []check.Op, _ *check.Report) []string {
	if e.mem[0] == nil {
		return nil
	}
	r := e.steadyRate(ops)
	return []string{fmt.Sprintf("workers=%d seconds=%.1f ops_per_s=%.0f admitted_per_s=%.0f error_rate=%.4f admitted_p50=%v admitted_p99=%v",
		r.workers, r.secs, r.opsPerS, r.admPerS, r.errRate, r.p50.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond))}
}

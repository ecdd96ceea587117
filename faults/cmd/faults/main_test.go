package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore/etcdtest"
)

// The negative controls: a deliberately broken system must make the suite
// report non-zero safety figures and exit non-zero. And the real system,
// through the same command, passes.

// fields parses the key=value line that starts with prefix.
func fields(t *testing.T, out, prefix string) map[string]string {
	t.Helper()
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, prefix) {
			m := map[string]string{}
			for _, kv := range strings.Fields(line) {
				k, v, _ := strings.Cut(kv, "=")
				m[k] = v
			}
			return m
		}
	}
	t.Fatalf("no line starting %q in:\n%s", prefix, out)
	return nil
}

func num(t *testing.T, f map[string]string, key string) int {
	t.Helper()
	n, err := strconv.Atoi(f[key])
	if err != nil {
		t.Fatalf("%s=%q: %v", key, f[key], err)
	}
	return n
}

// decimal is num for a field with a fraction.
func decimal(t *testing.T, f map[string]string, key string) float64 {
	t.Helper()
	r, err := strconv.ParseFloat(f[key], 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", key, f[key], err)
	}
	return r
}

// herdLimit is the herd scenario's limit on herd_ratio (docs/faults.md).
const herdLimit = 2.0

func TestBrokenSystemsFail(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server and fenceproxy processes")
	}
	cases := []struct {
		brk, scenario string
		nonzero       []string
		zero          []string
	}{
		// Each replica on its own memory store: cross-replica fencing gone.
		{"memory", "load", []string{"stale_admissions", "unfenced_forwards", "regressions"}, nil},
		// The same on a Redis Cluster with a whole shard down: the dead
		// shard's resources are admitted (2xx) while no node holds them.
		{"memory", "cluster-shard-kill", []string{"stale_admissions", "unfenced_forwards", "dead_shard_2xx"}, nil},
		// A Cluster whose nodes keep no AOF: the dead shard's master comes
		// back empty, and its marks are found lost.
		{"nopersist", "cluster-shard-kill", []string{"lost_marks", "regressions"}, []string{"dead_shard_2xx"}},
		// A Cluster that refuses every slot while one is not covered: the
		// other shards' requests get 503 while the killed master is judged
		// failed and not yet replaced.
		{"fullcoverage", "cluster-failover", []string{"other_shards_unavailable"}, []string{"stale_admissions", "unfenced_forwards", "regressions", "lost_marks"}},
		// Refused requests also reach the upstream by another path.
		{"bypass", "load", []string{"unfenced_forwards"}, []string{"stale_admissions", "regressions"}},
		// Redis without AOF, killed, and both replicas restarted with it:
		// every mark is lost, and no replica remembers the store's identity
		// or a mark (a replica that kept running answers 503 store-lost).
		{"nopersist", "redis-kill", []string{"regressions", "lost_marks"}, nil},
		// The store flushed, and the operator forces the identity record
		// without raising the marks first: the marks the store holds after
		// the "restore" are below tokens admitted before the flush.
		{"noraise", "redis-flush", []string{"regressions", "lost_marks"}, nil},
		// The proxies without the drain barrier: the streamed older write
		// lands after the newer one, which the suite judges as it would
		// with the barrier (and the order figures stay fatal).
		{"nodrain", "slow-body", []string{"large_old_landed_after_newer"}, []string{"stale_admissions", "unfenced_forwards", "regressions", "large_newer_held"}},
		// etcd: a follower killed while the others commit, then both of
		// those killed, the leader restarted on an empty data directory
		// and the follower on its own: a majority without the last marks
		// (both replicas restarted meanwhile, so nothing heals them).
		{"etcdwipe", "etcd-leader-kill", []string{"regressions", "lost_marks"}, nil},
		// Clients that give up, with the proxies' upstream deadline (100 ms)
		// shorter than the service's work (250 ms): the barrier lets newer
		// writes go while the older ones are still being processed, as a
		// proxy that released when its client left would.
		{"shortdeadline", "client-gives-up", []string{"overlaps", "gave_up"}, []string{"stale_admissions", "unfenced_forwards", "regressions"}},
		// The same deadline in clock-step: the forward round's newer write
		// begins while the older one is being processed, as with deadlines
		// timed by a clock that jumped past them.
		{"shortdeadline", "clock-step", []string{"overlaps"}, []string{"stale_admissions", "unfenced_forwards", "regressions"}},
		// Without the barrier, (5, 1) overtakes the unsequenced 5 under
		// en_US.UTF-8 as a locale-dependent comparison lets it.
		{"nodrain", "locale", []string{"overlaps", "newer_early"}, []string{"stale_admissions", "unfenced_forwards", "regressions"}},
		// Every release wakes every waiter of the store, and each asks
		// the store what is left, as a wake-up that does not say whom it
		// unblocks must: the herd's cost figure (herd_ratio) rises past
		// the scenario's limit (checked below). Nothing is admitted out
		// of order: the barrier holds, only dearer.
		{"broadcast", "herd", nil, []string{"stale_admissions", "unfenced_forwards", "regressions", "inversions", "overlaps"}},
		// Releases sent once, none again after the failover: the entries
		// of the requests in flight at the master's kill hold their
		// resources until the waiters give them up, past the 5 s target
		// (resume_s above it, or a resource not admitted again at all
		// before the scenario ended: checked below).
		{"noretry", "failover-barrier", nil, []string{"stale_admissions", "unfenced_forwards", "regressions"}},
		// The same on a slow failover after a replication cut: the
		// releases the promoted replica lacks are never sent again.
		{"noretry", "failover-slow-cut", nil, []string{"stale_admissions", "unfenced_forwards", "regressions"}},
		// Redis restored from its own backup, the copy's generation raised
		// above any the replicas have seen (the generation check defeated,
		// everything else as in the real run): the stale probe, a token the
		// older store holds as its mark, sent through a warm replica that
		// never saw its resource's newer mark, is admitted and forwarded.
		// The real run answers it 503 store-lost.
		{"nogeneration", "redis-restore", []string{"stale_admissions", "stale_below_admitted", "unfenced_forwards"}, nil},
		// A bolt file restored from its backup under a replica that lost
		// its generation file, so remembers nothing: the stale tokens of
		// the backup's mark are admitted and forwarded.
		{"nogeneration", "bolt-restore", []string{"stale_admissions", "unfenced_forwards", "stale_forwarded"}, []string{"detected"}},
	}
	for _, c := range cases {
		t.Run(c.brk+"/"+c.scenario, func(t *testing.T) {
			if c.brk == "etcdwipe" {
				if _, err := etcdtest.FindBin(); err != nil && etcdtest.MaySkip() {
					t.Skip(err)
				}
			}
			var out, log bytes.Buffer
			err := run([]string{"-mode", "smoke", "-break", c.brk, "-run", "^" + c.scenario + "$", "-dir", t.TempDir()}, &out, &log)
			if err == nil {
				t.Fatalf("the suite passed a broken system:\n%s\n%s", out.String(), log.String())
			}
			f := fields(t, out.String(), "scenario="+c.scenario+" ")
			for _, k := range c.nonzero {
				if num(t, f, k) == 0 {
					t.Errorf("%s=0 with -break %s:\n%s", k, c.brk, out.String())
				}
			}
			for _, k := range c.zero {
				if num(t, f, k) != 0 {
					t.Errorf("%s=%s with -break %s, want 0", k, f[k], c.brk)
				}
			}
			if c.scenario == "herd" {
				r := decimal(t, f, "herd_ratio")
				if r <= herdLimit {
					t.Errorf("herd_ratio=%s with -break %s, want above %v", f["herd_ratio"], c.brk, herdLimit)
				}
			}
			if strings.HasPrefix(c.scenario, "failover-") {
				r := decimal(t, f, "resume_s")
				if r <= 5 && num(t, f, "resources_not_resumed") == 0 {
					t.Errorf("resume_s=%s resources_not_resumed=0 with -break %s: every resource resumed within the 5 s target", f["resume_s"], c.brk)
				}
			}
			if f["verdict"] != "FAIL" {
				t.Errorf("verdict=%s, want FAIL", f["verdict"])
			}
			if t.Failed() {
				t.Logf("output:\n%s\nprogress:\n%s", out.String(), log.String())
			}
		})
	}
}

func TestRealSystemPasses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server and fenceproxy processes")
	}
	var out, log bytes.Buffer
	if err := run([]string{"-mode", "smoke", "-run", "^(redis-kill|redis-flush|slow-body|load|load-drain-off|drain-wake)$", "-dir", t.TempDir()}, &out, &log); err != nil {
		t.Fatalf("%v\n%s\n%s", err, out.String(), log.String())
	}
	for _, name := range []string{"redis-kill", "redis-flush", "slow-body", "load", "drain-wake"} {
		f := fields(t, out.String(), "scenario="+name+" ")
		if f["verdict"] != "pass" || num(t, f, "admitted") == 0 {
			t.Errorf("%s: %v", name, f)
		}
		// With the drain barrier the order figures are safety figures: a
		// pass means they are 0.
		if num(t, f, "inversions") != 0 || num(t, f, "overlaps") != 0 {
			t.Errorf("%s passed with inversions=%s overlaps=%s", name, f["inversions"], f["overlaps"])
		}
	}
	fields(t, out.String(), "measure=load ")
	d := fields(t, out.String(), "measure=load-drain ")
	num(t, d, "waited")
	num(t, d, "timeout")
	// The same load without the barrier: measured, not failed.
	off := fields(t, out.String(), "measure=load-drain-off ")
	if off["verdict"] != "pass" || num(t, off, "admitted") == 0 || num(t, off, "stale_admissions") != 0 {
		t.Errorf("load-drain-off: %v", off)
	}
	num(t, off, "inversions")
	// The small stalled body is read before admission: the older write is
	// refused and the newer one is what the upstream holds. The streamed one
	// is admitted at its headers, and the barrier holds the newer write
	// until it has landed.
	f := fields(t, out.String(), "scenario=slow-body ")
	if num(t, f, "small_old_refused") != 1 || num(t, f, "small_old_landed_after_newer") != 0 || num(t, f, "small_newer_held") != 1 {
		t.Errorf("slow-body, small: %v", f)
	}
	if num(t, f, "large_old_admitted") != 1 || num(t, f, "large_old_landed_after_newer") != 0 || num(t, f, "large_newer_held") != 1 {
		t.Errorf("slow-body, streamed: %v", f)
	}
	// The flushed store: refused store-lost until the operator's restore,
	// nothing admitted meanwhile, every mark restored.
	fl := fields(t, out.String(), "scenario=redis-flush ")
	if num(t, fl, "loss_store_lost") == 0 || num(t, fl, "loss_admitted") != 0 || num(t, fl, "loss_other") != 0 ||
		num(t, fl, "replicas_lost") != 2 || num(t, fl, "lost_marks") != 0 || num(t, fl, "raised") == 0 {
		t.Errorf("redis-flush: %v", fl)
	}
	w := fields(t, out.String(), "scenario=drain-wake ")
	if num(t, w, "trials") == 0 || num(t, w, "waited") == 0 {
		t.Errorf("drain-wake: %v", w)
	}
	fields(t, out.String(), "measure=drain-wake ")
}

// runPassing runs one scenario of the real system in smoke mode, requires
// the run to pass, and returns its output lines.
func runPassing(t *testing.T, scenario string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts store and fenceproxy processes")
	}
	var out, log bytes.Buffer
	if err := run([]string{"-mode", "smoke", "-run", "^" + scenario + "$", "-dir", t.TempDir()}, &out, &log); err != nil {
		t.Fatalf("%v\n%s\n%s", err, out.String(), log.String())
	}
	return out.String()
}

// Many waiters on one resource: a release wakes only the waiters it may
// unblock, so the 100 writers' store commands per decided request stay
// within the limit of the one writer's, and nothing passes the held
// writer. The "broadcast" control fails the same run.
func TestHerdPasses(t *testing.T) {
	out := runPassing(t, "herd")
	f := fields(t, out, "scenario=herd ")
	r := decimal(t, f, "herd_ratio")
	if f["verdict"] != "pass" || r > herdLimit || num(t, f, "inversions") != 0 || num(t, f, "overlaps") != 0 {
		t.Errorf("herd: %v", f)
	}
}

// A Sentinel failover with the barrier on: the releases the old master
// never acknowledged are retried, those it acknowledged are sent again to
// the new one, and every resource admits again within 5 s of the
// promotion. The "noretry" control fails the same run.
func TestFailoverBarrierPasses(t *testing.T) {
	out := runPassing(t, "failover-barrier")
	f := fields(t, out, "scenario=failover-barrier ")
	r := decimal(t, f, "resume_s")
	if f["verdict"] != "pass" || r > 5 || num(t, f, "resources_not_resumed") != 0 {
		t.Errorf("failover-barrier: %v", f)
	}
}

// A Redis Cluster: a shard's master killed under load and its replica
// promoted loses no admitted mark, and the other shards admit through the
// failover; a shard down whole gets nothing admitted for its resources.
// The "memory" control fails the second.
func TestClusterPasses(t *testing.T) {
	for _, c := range []struct {
		scenario      string
		nonzero, zero []string
	}{
		{"cluster-failover", []string{"other_shards_2xx", "killed_shard_unavailable"}, []string{"lost_marks"}},
		{"cluster-shard-kill", []string{"other_shards_2xx", "dead_shard_unavailable"}, []string{"lost_marks", "dead_shard_2xx"}},
	} {
		t.Run(c.scenario, func(t *testing.T) {
			f := fields(t, runPassing(t, c.scenario), "scenario="+c.scenario+" ")
			for _, k := range c.nonzero {
				if num(t, f, k) == 0 {
					t.Errorf("%s=0: %v", k, f)
				}
			}
			for _, k := range c.zero {
				if num(t, f, k) != 0 {
					t.Errorf("%s=%s, want 0: %v", k, f[k], f)
				}
			}
			if f["verdict"] != "pass" {
				t.Errorf("verdict=%s: %v", f["verdict"], f)
			}
		})
	}
}

// Redis restored from its backup: both replicas refuse store-lost,
// the stale probe too (a token the older store holds as its mark, sent
// through a replica that had seen the newer generation); the marks the
// restore took back (erased_marks, those admitted between the backup and
// the restore) are raised by the runbook's recovery, so none stays lost.
func TestRedisRestorePasses(t *testing.T) {
	out := runPassing(t, "redis-restore")
	f := fields(t, out, "scenario=redis-restore ")
	if f["verdict"] != "pass" || f["stale_probe"] != "store-lost" || num(t, f, "replicas_lost") != 2 ||
		num(t, f, "erased_marks") == 0 || num(t, f, "raised") == 0 || num(t, f, "lost_marks") != 0 || num(t, f, "stale_admissions") != 0 {
		t.Errorf("redis-restore: %v", f)
	}
}

// A bolt file copied back from its backup: every stale token refused
// store-lost and none forwarded, the runbook brings the replica back; with
// the generation file restored too, the line says plainly that nothing
// could tell (the documented limit), and that is a measure, not a pass.
func TestBoltRestorePasses(t *testing.T) {
	out := runPassing(t, "bolt-restore")
	f := fields(t, out, "scenario=bolt-restore ")
	if f["verdict"] != "pass" || f["variant"] != "file-only" || num(t, f, "stale_sent") == 0 ||
		num(t, f, "detected") != num(t, f, "stale_sent") || num(t, f, "stale_forwarded") != 0 || f["recovered"] != "true" {
		t.Errorf("bolt-restore, file-only: %v", f)
	}
	m := fields(t, out, "measure=bolt-restore ")
	if m["variant"] != "with-generation-file" || m["detectable"] != "no" || m["limit"] != "documented" || num(t, m, "stale_sent") == 0 {
		t.Errorf("bolt-restore, with the generation file: %v", m)
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-mode", "forever"}, {"-break", "everything"}, {"-run", "("}, {"-run", "no-such-scenario", "-mode", "smoke"}} {
		var out, log bytes.Buffer
		if err := run(args, &out, &log); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

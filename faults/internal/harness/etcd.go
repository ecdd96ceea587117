package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceproxy/fenceproxy/faults/check"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore/etcdtest"
)

// The etcd scenario (etcd-leader-kill): three etcd members, started by
// fencestore/etcdstore/etcdtest (the code the etcd store's own tests start
// them with), and both replicas on FENCE_STORE=etcd with every member's
// endpoint. Mid-load the leader, as the members' status reports it, is
// SIGKILLed by its PID; the two others elect a new one while the load goes
// on; the killed member is restarted on its data directory and rejoins.

// etcdKill is one round of etcd-leader-kill, on the history's clock.
type etcdKill struct {
	start        int64  // SIGKILL sent
	killed, next string // the killed leader, the member elected after it
	pid          int
	elected      time.Duration // from the kill until a survivor reported itself leader
	restart      int64         // the killed member's restart began
	ready        int64         // it reported itself healthy
	rejoined     time.Duration // from the restart until then
}

// startEtcd starts the three members and points the replicas at all of
// them.
func (e *env) startEtcd(proxyEnv map[string]string) error {
	bin, err := etcdtest.FindBin()
	if err != nil {
		return err
	}
	dir, err := mkdir(e.h.dir, "etcd")
	if err != nil {
		return err
	}
	c, err := etcdtest.Launch(etcdtest.Config{Members: 3, Bin: bin, Dir: dir})
	if err != nil {
		return err
	}
	e.etcd = c
	if e.ec, err = c.Dial(); err != nil {
		return err
	}
	proxyEnv["FENCE_STORE"] = "etcd"
	proxyEnv["FENCE_ETCD_ENDPOINTS"] = strings.Join(c.Endpoints(), ",")
	return nil
}

// etcdFetch reads the marks through c: one linearizable range read.
func etcdFetch(c *clientv3.Client) func(ctx context.Context, keys []string) ([]uint64, error) {
	return func(ctx context.Context, keys []string) ([]uint64, error) { return etcdMarks(ctx, c, keys) }
}

// etcdMarks reads keys in one linearizable range read (one revision: a
// snapshot) of the range every key begins with, and parses the etcd
// store's values (the token in 20 decimal digits; doc.go of etcdstore),
// independently of the store's own code. A missing key is mark 0.
func etcdMarks(ctx context.Context, c *clientv3.Client, keys []string) ([]uint64, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	prefix := keys[0]
	for _, k := range keys[1:] {
		for !strings.HasPrefix(k, prefix) {
			prefix = prefix[:len(prefix)-1]
		}
	}
	if prefix == "" {
		return nil, errors.New("etcd marks: the keys have no common prefix")
	}
	resp, err := c.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	vals := map[string]string{}
	for _, kv := range resp.Kvs {
		vals[string(kv.Key)] = string(kv.Value)
	}
	marks := make([]uint64, len(keys))
	for i, k := range keys {
		v, ok := vals[k]
		if !ok {
			continue
		}
		m, err := parseEtcdMark(v)
		if err != nil {
			return nil, fmt.Errorf("mark %s: %w", k, err)
		}
		marks[i] = m
	}
	return marks, nil
}

// parseEtcdMark parses a stored etcd mark without a sequence: exactly 20
// decimal digits (the suite's routes have no sequences).
func parseEtcdMark(v string) (uint64, error) {
	if len(v) != 20 || strings.Trim(v, "0123456789") != "" {
		return 0, fmt.Errorf("value %q is not 20 decimal digits", v)
	}
	return strconv.ParseUint(v, 10, 64) // ParseUint reads leading zeros as decimal
}

// etcdSnapshot reads the marks through the given members only (a new
// client of theirs), linearizably, retrying for up to 15s: a read that
// needs a leader waits for one.
func (e *env) etcdSnapshot(members ...*etcdtest.Member) ([]check.Op, error) {
	c, err := e.etcd.Dial(members...)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var ops []check.Op
	names := make([]string, len(members))
	for i, m := range members {
		names[i] = m.Name
	}
	err = etcdtest.Until(15*time.Second, "the marks read through "+strings.Join(names, ","), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		call := e.now()
		marks, err := etcdMarks(ctx, c, e.rd.keys)
		if err != nil {
			return err
		}
		ops = e.rd.readOps(marks, call, e.now())
		return nil
	})
	return ops, err
}

// etcdLeaderKill: per round, find the leader (the member whose status
// names itself), SIGKILL it by its PID, wait until one of the two others
// reports itself leader, and read the marks through those two (every mark
// admitted before the kill must be there); the load runs on for a second
// on the two, then the killed member is restarted on its data directory,
// and once it reports itself healthy the marks are read through it alone
// (every mark admitted before its restart must be there). Both reads join
// the history (they are linearizable reads of the live cluster) and are
// checkpoints for lost_marks. The fault's window runs from the kill until
// the restarted member is healthy.
func etcdLeaderKill(ctx context.Context, e *env) error {
	if e.etcd == nil || e.rd == nil {
		return errors.New("no etcd cluster")
	}
	if e.opts.Break == "etcdwipe" {
		if err := e.pause(ctx, 0); err != nil {
			return err
		}
		if err := e.etcdWipe(ctx); err != nil {
			return err
		}
		return e.sleep(ctx, etcdRecordHold+e.p.cooldown)
	}
	for i := range e.p.rounds {
		if err := e.pause(ctx, i); err != nil {
			return err
		}
		leader, err := e.etcd.WaitLeader(10 * time.Second)
		if err != nil {
			return err
		}
		var survivors []*etcdtest.Member
		for _, m := range e.etcd.Members {
			if m != leader {
				survivors = append(survivors, m)
			}
		}
		k := etcdKill{killed: leader.Name, pid: leader.Pid()}
		k.start = e.now()
		t0 := time.Now()
		leader.Kill() // SIGKILL by its PID; returns once it has exited
		next, err := e.etcd.WaitLeader(15 * time.Second)
		if err != nil {
			return err
		}
		k.elected, k.next = time.Since(t0), next.Name
		reads, err := e.etcdSnapshot(survivors...)
		if err != nil {
			return err
		}
		e.checkpoint(k.start, reads)
		e.addOps(reads...)
		if err := e.sleep(ctx, time.Second); err != nil {
			return err
		}
		k.restart = e.now()
		t1 := time.Now()
		if err := leader.Relaunch(); err != nil {
			return err
		}
		k.rejoined, k.ready = time.Since(t1), e.now()
		if reads, err = e.etcdSnapshot(leader); err != nil {
			return err
		}
		e.checkpoint(k.restart, reads)
		e.addOps(reads...)
		e.mu.Lock()
		e.etcdKills = append(e.etcdKills, k)
		e.mu.Unlock()
		e.fault(k.start, -1)
		e.logf("SIGKILL etcd leader %s pid %d; %s leader after %v; %s restarted on its data as pid %d, healthy after %v",
			k.killed, k.pid, k.next, k.elected.Round(time.Millisecond), k.killed, leader.Pid(), k.rejoined.Round(time.Millisecond))
	}
	// The in-flight records of requests whose release was lost in the
	// election hold their resources until their leases expire, which the
	// new leader renewed (etcdstore's doc): leave them the time, so that
	// the cooldown shows the load forwarded again.
	return e.sleep(ctx, etcdRecordHold+e.p.cooldown)
}

// etcdRecordHold is about how long, after a failover, an in-flight record
// whose release was lost still holds its resource: its lease (the
// upstream deadline, 2s, rounded up, plus 1s) renewed by the new leader
// for its TTL and an election timeout (1s), less the time the killed
// member stays down.
const etcdRecordHold = 3 * time.Second

// etcdKillFields: per round (comma lists in long mode), the killed leader
// and the new one, the time to the new leader (elected_ms: a survivor's
// status names itself) and to the first 2xx answer to a request sent after
// the kill (first_2xx_ms), the 503s and failed requests answered from the
// kill until that answer (election_503, election_failed) and over the
// whole window, until the restarted member was healthy (window_503), the
// restart (rejoined_ms); then 2xx answers to requests sent after the last
// restart (ok_after_restart), and lost_marks.
func etcdKillFields(e *env, ops []check.Op, r *check.Report) []string {
	var killed, next, elected, first, e503, efail, w503, rejoined []string
	for _, k := range e.etcdKills {
		end := k.ready
		firstAt := int64(-1)
		for i := range ops {
			o := &ops[i]
			if o.Status/100 == 2 && o.Call > k.start && (firstAt < 0 || o.Return < firstAt) {
				firstAt = o.Return
			}
		}
		in := func(o *check.Op, from, to int64) bool { return o.Return >= from && (to < 0 || o.Return <= to) }
		var n503, nfail, nw503 int
		for i := range ops {
			o := &ops[i]
			switch o.Outcome {
			case check.Unavailable:
				if in(o, k.start, firstAt) {
					n503++
				}
				if in(o, k.start, end) {
					nw503++
				}
			case check.Failed:
				if in(o, k.start, firstAt) {
					nfail++
				}
			}
		}
		killed = append(killed, k.killed)
		next = append(next, k.next)
		elected = append(elected, strconv.FormatInt(k.elected.Milliseconds(), 10))
		if firstAt >= 0 {
			first = append(first, strconv.FormatInt(time.Duration(firstAt-k.start).Milliseconds(), 10))
		} else {
			first = append(first, "none")
		}
		e503 = append(e503, strconv.Itoa(n503))
		efail = append(efail, strconv.Itoa(nfail))
		w503 = append(w503, strconv.Itoa(nw503))
		rejoined = append(rejoined, strconv.FormatInt(k.rejoined.Milliseconds(), 10))
	}
	okAfter := 0
	if n := len(e.etcdKills); n > 0 {
		okAfter = count(ops, func(o *check.Op) bool { return o.Status/100 == 2 && o.Call > e.etcdKills[n-1].ready })
	}
	j := func(s []string) string { return strings.Join(s, ",") }
	f := []string{fmt.Sprintf("etcd_members=3 killed_leader=%s new_leader=%s elected_ms=%s first_2xx_ms=%s election_503=%s election_failed=%s window_503=%s rejoined_ms=%s ok_after_restart=%d",
		j(killed), j(next), j(elected), j(first), j(e503), j(efail), j(w503), j(rejoined), okAfter)}
	return append(f, lostFields(e, ops, r)...)
}

// expectEtcdKill: the fault showed (503s or failed requests in its
// window), every round elected a new leader, and both snapshots of each
// round (through the survivors, through the restarted member; one, through
// the new majority, in the etcdwipe control) read every resource's mark.
func expectEtcdKill(e *env, ops []check.Op) []string {
	out := expectUnavailable(-1)(e, ops)
	rounds, per := e.p.rounds, 2
	if e.opts.Break == "etcdwipe" {
		rounds, per = 1, 1
	}
	if len(e.etcdKills) != rounds {
		out = append(out, fmt.Sprintf("%d of %d leader kills completed", len(e.etcdKills), rounds))
	}
	if len(e.checkpoints) != per*len(e.etcdKills) {
		out = append(out, fmt.Sprintf("%d mark snapshots for %d kills, want %d each", len(e.checkpoints), len(e.etcdKills), per))
	}
	for _, cp := range e.checkpoints {
		if len(cp.reads) != e.p.resources {
			out = append(out, fmt.Sprintf("a mark snapshot read %d marks, want %d", len(cp.reads), e.p.resources))
		}
	}
	return out
}

// etcdWipe is the "etcdwipe" control: the failure raft does not survive.
// A follower is SIGKILLed, and the leader and the other follower go on
// committing admissions (100 forwarded requests); then both are SIGKILLed too, the
// leader's data directory is deleted and the leader restarted on it
// empty, and the first follower restarted on its data. Those two are a
// majority, and neither holds that second's marks: they elect the stale
// follower, and the marks admitted in the second are gone, while the
// identity record, older, survives (the replicas cannot tell). The other
// follower, which has them, stays down. Both replicas are killed with the
// two members and restarted once the marks have been read from the new
// majority, as nopersist restarts them: a replica that kept running would
// raise each lost mark back from its cache at its first admission
// (FENCE_MARK_CACHE, the heal), and a fresh token restores a mark within
// milliseconds, so only reads in between would show the loss. (Freezing the first follower instead of killing it loses
// nothing: the leader's appends wait in its socket buffers, and it reads
// them when it resumes.)
func (e *env) etcdWipe(ctx context.Context) error {
	leader, err := e.etcd.WaitLeader(10 * time.Second)
	if err != nil {
		return err
	}
	var stale, other *etcdtest.Member
	for _, m := range e.etcd.Members {
		switch {
		case m == leader:
		case stale == nil:
			stale = m
		default:
			other = m
		}
	}
	k := etcdKill{killed: stale.Name + "+" + leader.Name + "+" + other.Name, pid: leader.Pid()}
	staleAt := e.now()
	stale.Kill()
	// The releases that went to the killed member failed, and their
	// records hold their resources until their leases expire: wait until
	// the two others have admitted and forwarded 100 requests sent after
	// the kill, the marks the stale member will not have.
	err = etcdtest.Until(15*time.Second, "100 requests forwarded without "+stale.Name, func() error {
		n := count(e.ld.history(), func(o *check.Op) bool { return o.Status/100 == 2 && o.Call > staleAt })
		if n < 100 {
			return fmt.Errorf("%d forwarded", n)
		}
		return nil
	})
	if err != nil {
		return err
	}
	k.start = e.now()
	t0 := time.Now()
	leader.Kill()
	other.Kill()
	if err := os.RemoveAll(filepath.Join(leader.Dir(), "data")); err != nil {
		return err
	}
	for _, r := range e.proxies {
		if err := r.Kill(); err != nil {
			return err
		}
	}
	k.restart = e.now()
	relaunched := make(chan error, 1)
	go func() { relaunched <- leader.Relaunch() }()
	// Start the stale member once the wiped one has bootstrapped afresh
	// (its new write-ahead log exists): before that, the stale member
	// would tell it that it was bootstrapped already, and it would refuse
	// to start.
	err = etcdtest.Until(20*time.Second, leader.Name+" bootstrapped on an empty data directory", func() error {
		_, err := os.Stat(filepath.Join(leader.Dir(), "data", "member", "wal"))
		return err
	})
	if err == nil {
		err = stale.Relaunch()
	}
	if rerr := <-relaunched; err == nil {
		err = rerr
	}
	if err != nil {
		return err
	}
	next, err := e.etcd.WaitLeader(15 * time.Second)
	if err != nil {
		return err
	}
	k.elected, k.next = time.Since(t0), next.Name
	k.rejoined, k.ready = time.Duration(e.now()-k.restart), e.now()
	reads, err := e.etcdSnapshot(leader, stale)
	if err != nil {
		return err
	}
	e.checkpoint(k.start, reads)
	e.addOps(reads...)
	for _, r := range e.proxies {
		if err := r.Restart(); err != nil {
			return err
		}
	}
	e.mu.Lock()
	e.etcdKills = append(e.etcdKills, k)
	e.mu.Unlock()
	e.fault(k.start, -1)
	e.logf("etcdwipe: SIGKILL %s, %v later %s and %s; %s restarted on an empty data directory, %s on its data: %s leader",
		stale.Name, time.Duration(k.start-staleAt).Round(time.Millisecond), leader.Name, other.Name, leader.Name, stale.Name, next.Name)
	return nil
}

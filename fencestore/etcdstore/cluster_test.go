package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore/etcdtest"
)

// clusterOp is one admission of TestClusterLeaderKilled, with its
// invocation and response on a logical clock.
type clusterOp struct {
	res       int
	token     uint64
	cmp       fencestore.Compare
	inv, resp int64
	start, at time.Time // when it began and completed
	d         fencestore.Decision
	err       error
}

// Three members; the leader is killed (SIGKILL, by its PID) while
// replicas admit on a few resources, some with the barrier. Admissions
// fail while no leader is elected (503, fail closed) and go on after the
// election, and no mark moves backward: every decision is one that an
// order of atomic steps consistent with real time explains, across the
// failover. The member is then restarted and catches up.
func TestClusterLeaderKilled(t *testing.T) {
	c := etcdtest.StartCluster(t, 3)
	const resources, workers = 3, 6
	stores := make([]*etcdstore.Store, 2) // two replicas
	for i := range stores {
		stores[i] = etcdstore.New(c.Client(t), etcdstore.Options{KeyPrefix: "fence:"})
		defer stores[i].Close()
	}
	id, err := stores[0].Init(ctxT(t), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stores {
		s.Expect(id)
	}
	leader := c.Leader(t, 10*time.Second)

	var clock atomic.Int64
	var next [resources]atomic.Uint64 // tokens climb per resource
	stop := make(chan struct{})
	var killedAt time.Time
	var mu sync.Mutex
	var history []clusterOp
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			s := stores[w%len(stores)]
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := rng.IntN(resources)
				// Mostly climbing, sometimes a token just below the last
				// one handed out (often stale), sometimes equal.
				tok := next[r].Add(uint64(rng.IntN(2)))
				if rng.IntN(4) == 0 && tok > 3 {
					tok -= uint64(rng.IntN(3))
				}
				o := clusterOp{res: r, token: tok, cmp: fencestore.Compare(rng.IntN(2))}
				a := fencestore.Admission{Resource: fmt.Sprintf("c/%d", r), Token: tok, Compare: o.cmp}
				if rng.IntN(3) == 0 {
					a.Flight = 5 * time.Second
				}
				ctx, cancel := context.WithTimeout(t.Context(), time.Second)
				o.start = time.Now()
				o.inv = clock.Add(1)
				o.d, o.err = s.Admit(ctx, a)
				o.resp = clock.Add(1)
				o.at = time.Now()
				cancel()
				s.Release(o.d.Flight)
				if o.err != nil && !errors.Is(o.err, fencestore.ErrUnavailable) {
					t.Errorf("Admit: %v does not wrap ErrUnavailable", o.err)
				}
				var lost *fencestore.LostError
				if errors.As(o.err, &lost) {
					t.Errorf("Admit across a failover: %v", o.err)
				}
				mu.Lock()
				history = append(history, o)
				mu.Unlock()
				if o.err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	time.Sleep(time.Second)
	killedAt = time.Now()
	t.Logf("killing the leader %s (pid %d)", leader.Name, leader.Pid())
	leader.Kill()
	newLeader := c.Leader(t, 15*time.Second)
	t.Logf("new leader %s after %v", newLeader.Name, time.Since(killedAt).Round(time.Millisecond))
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()

	var before, after, failed int
	var firstAfter time.Time
	for _, o := range history {
		switch {
		case o.err != nil:
			failed++
		case o.at.Before(killedAt):
			before++
		default:
			after++
			if o.start.After(killedAt) && (firstAfter.IsZero() || o.at.Before(firstAfter)) {
				firstAfter = o.at
			}
		}
	}
	t.Logf("admissions: %d decided before the kill, %d after, %d failed (503)", before, after, failed)
	shown := 0
	for _, o := range history {
		if o.err != nil && shown < 5 {
			shown++
			t.Logf("e.g. at %+v after the kill: %v", o.at.Sub(killedAt).Round(time.Millisecond), o.err)
		}
	}
	if !firstAfter.IsZero() {
		t.Logf("first decision of an admission begun after the kill: %v after it", firstAfter.Sub(killedAt).Round(time.Millisecond))
	}
	if before == 0 || after == 0 {
		t.Fatalf("no decisions before (%d) or after (%d) the kill", before, after)
	}
	byRes := make([][]clusterOp, resources)
	for _, o := range history {
		byRes[o.res] = append(byRes[o.res], o)
	}
	finals := make([]fencestore.Mark, resources)
	for r := range byRes {
		finals[r] = checkClusterHistory(t, stores[0], fmt.Sprintf("c/%d", r), byRes[r])
	}

	// The killed member comes back on its data and catches up.
	leader.Restart(t)
	cl := etcdtest.NewClient(t, leader.Endpoint())
	etcdtest.Poll(t, 10*time.Second, "the restarted member's marks", func() error {
		for r, want := range finals {
			resp, err := cl.Get(ctxT(t), fmt.Sprintf("fence:c/%d", r), clientv3.WithSerializable())
			if err != nil {
				return err
			}
			if len(resp.Kvs) == 0 || string(resp.Kvs[0].Value) != etcdValue(want) {
				return fmt.Errorf("c/%d on the restarted member: %v, want %s", r, resp.Kvs, etcdValue(want))
			}
		}
		return nil
	})
	if _, err := stores[1].Admit(ctxT(t), fencestore.Admission{Resource: "c/0", Token: finals[0].Token + 1}); err != nil {
		t.Fatalf("admission after the restart: %v", err)
	}
}

func etcdValue(m fencestore.Mark) string {
	v := fmt.Sprintf("%020d", m.Token)
	if m.HasSequence {
		v += fmt.Sprintf(":%020d", m.Sequence)
	}
	return v
}

// checkClusterHistory checks one resource's admissions: each decision is
// consistent in itself; none reports a mark below one reported by an
// admission that completed before it began; the final mark is the
// greatest admitted token, or the token of a failed admission (a 503 is
// indeterminate: it may have been applied). It returns the final mark.
func checkClusterHistory(t *testing.T, s fencestore.Keeper, name string, ops []clusterOp) fencestore.Mark {
	t.Helper()
	var ok []clusterOp
	failedTokens := map[uint64]bool{}
	var greatest uint64
	for _, o := range ops {
		if o.err != nil {
			failedTokens[o.token] = true
			continue
		}
		ok = append(ok, o)
		if o.d.Admitted {
			if o.d.Mark != o.token {
				t.Errorf("%s: %d %v admitted with mark %d", name, o.token, o.cmp, o.d.Mark)
			}
			greatest = max(greatest, o.token)
		} else if o.cmp.Admits(o.token, o.d.Mark, true) {
			t.Errorf("%s: %d %v refused by mark %d, which admits it", name, o.token, o.cmp, o.d.Mark)
		}
	}
	byResp := append([]clusterOp(nil), ok...)
	sort.Slice(byResp, func(i, j int) bool { return byResp[i].resp < byResp[j].resp })
	prefixMax := make([]uint64, len(byResp))
	for i, o := range byResp {
		prefixMax[i] = o.d.Mark
		if i > 0 {
			prefixMax[i] = max(prefixMax[i], prefixMax[i-1])
		}
	}
	bad := 0
	for _, b := range ok {
		k := sort.Search(len(byResp), func(i int) bool { return byResp[i].resp > b.inv })
		if k == 0 {
			continue
		}
		if seen := prefixMax[k-1]; b.d.Mark < seen || (b.d.Admitted && !b.cmp.Admits(b.token, seen, true)) {
			if bad++; bad <= 5 {
				t.Errorf("%s: %d %v decided %+v, after an admission completed with mark %d: the mark moved backward", name, b.token, b.cmp, b.d, seen)
			}
		}
	}
	m, has, err := s.Get(ctxT(t), name)
	if err != nil || !has {
		t.Fatalf("%s: final mark %v, %v", name, has, err)
	}
	if m.Token != greatest && !(m.Token > greatest && failedTokens[m.Token]) {
		t.Errorf("%s: final mark %d; the greatest admitted token is %d", name, m.Token, greatest)
	}
	return m
}

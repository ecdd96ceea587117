package harness

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/faults/check"
)

func TestParseClusterNodes(t *testing.T) {
	text := `07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host.example slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003 master,fail - 0 1426238318243 3 connected 10923-16383 [93->-292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f]
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 16000`
	nodes, err := parseClusterNodes(text)
	if err != nil {
		t.Fatal(err)
	}
	want := []clusterNode{
		{id: "07c37dfeb235213a872192d90877d0cd55635b91", addr: "127.0.0.1:30004", masterID: "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca"},
		{id: "67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1", addr: "127.0.0.1:30002", masterID: "-", master: true, slots: [][2]int{{5461, 10922}}},
		{id: "292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f", addr: "127.0.0.1:30003", masterID: "-", master: true, failed: true, slots: [][2]int{{10923, 16383}}},
		{id: "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca", addr: "127.0.0.1:30001", masterID: "-", master: true, slots: [][2]int{{0, 5460}, {16000, 16000}}},
	}
	if len(nodes) != len(want) {
		t.Fatalf("%d nodes, want %d", len(nodes), len(want))
	}
	for i := range want {
		g, w := nodes[i], want[i]
		if g.id != w.id || g.addr != w.addr || g.masterID != w.masterID || g.master != w.master || g.failed != w.failed || !slices.Equal(g.slots, w.slots) {
			t.Errorf("node %d: %+v, want %+v", i, g, w)
		}
	}
	for _, bad := range []string{"a b c", "id 127.0.0.1:1@2 master - 0 0 1 connected 10-x", "id 127.0.0.1:1@2 master - 0 0 1 connected 9-3"} {
		if _, err := parseClusterNodes(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestVictimShard(t *testing.T) {
	for _, tc := range []struct {
		name       string
		shards     [][]string
		victim     []string
		others     []string
		wantsError bool
	}{
		{"fullest", [][]string{{"r0"}, {"r1", "r2", "r3"}, {"r4", "r5"}}, []string{"r1", "r2", "r3"}, []string{"r0", "r4", "r5"}, false},
		{"tie: the first", [][]string{{"r0", "r1"}, {"r2", "r3"}, nil}, []string{"r0", "r1"}, []string{"r2", "r3"}, false},
		{"all on one shard", [][]string{nil, {"r0", "r1"}, nil}, nil, nil, true},
		{"no resources", [][]string{nil, nil, nil}, nil, nil, true},
		{"no shard", nil, nil, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var shards []clusterShard
			for _, r := range tc.shards {
				shards = append(shards, clusterShard{resources: r})
			}
			v, others, err := victimShard(shards)
			if tc.wantsError {
				if err == nil {
					t.Fatalf("picked %v", v.resources)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(v.resources, tc.victim) || !slices.Equal(others, tc.others) {
				t.Fatalf("victim %v others %v, want %v and %v", v.resources, others, tc.victim, tc.others)
			}
		})
	}
}

// TestClusterFigures: what expectCluster counts from a made-up history.
func TestClusterFigures(t *testing.T) {
	k := clusterKill{victim: []string{"r1"}, others: []string{"r0", "r2"}, start: 100, promoted: 150, rejoined: 200}
	ops := []check.Op{
		{Resource: "r1", Outcome: check.Unavailable, Status: 503, Call: 90, Return: 110},  // hit: returned inside
		{Resource: "r1", Outcome: check.Failed, Call: 120, Return: 300},                   // hit: called inside
		{Resource: "r1", Outcome: check.Unavailable, Status: 503, Call: 201, Return: 210}, // after the window
		{Resource: "r1", Outcome: check.Admitted, Status: 200, Call: 160, Return: 170},    // the killed shard's 2xx: not "served"
		{Resource: "r0", Outcome: check.Admitted, Status: 200, Call: 110, Return: 120},    // served
		{Resource: "r2", Outcome: check.Admitted, Status: 200, Call: 190, Return: 199},    // served
		{Resource: "r2", Outcome: check.Admitted, Status: 200, Call: 90, Return: 120},     // sent before the kill
		{Resource: "r0", Outcome: check.Stale, Status: 409, Call: 110, Return: 120},       // refused
		{Resource: "r3", Outcome: check.Admitted, Status: 200, Call: 110, Return: 120},    // neither list
		{Resource: "r2", Outcome: check.Unavailable, Status: 503, Call: 150, Return: 160}, // another shard down
		{Resource: "r3", Outcome: check.Unavailable, Status: 503, Call: 150, Return: 160}, // neither list
	}
	hit, served, otherDown := clusterFigures(k, ops)
	if hit != 2 || served != 2 || otherDown != 1 {
		t.Fatalf("hit %d served %d other shards down %d, want 2, 2 and 1", hit, served, otherDown)
	}
	e := &env{clusterKills: []clusterKill{k}}
	if p := expectCluster(e, ops); len(p) != 0 {
		t.Fatalf("problems %v", p)
	}
	if p := expectCluster(e, ops[2:4]); len(p) != 2 {
		t.Fatalf("problems %v, want the kill unseen and the others idle", p)
	}
	if p := expectCluster(&env{}, ops); len(p) != 1 {
		t.Fatalf("problems %v, want no shard killed", p)
	}
	var res Result
	if judgeCluster(e, ops, &res); len(res.Violations) != 1 {
		t.Fatalf("violations %v, want the other shard's 503", res.Violations)
	}
	res = Result{}
	if judgeCluster(e, ops[:len(ops)-2], &res); len(res.Violations) != 0 {
		t.Fatalf("violations %v, want none without the other shard's 503", res.Violations)
	}
}

// TestClusterTopology starts the topology (six real nodes), and checks
// that the load's resources spread over the three shards, that the reader
// reads every mark through each key's master with its replica's
// acknowledgement, that a replica's snapshot reads what its master wrote,
// and that a read with one shard's master killed keeps the other shards'
// marks and names the missing one.
func TestClusterTopology(t *testing.T) {
	h := &Harness{dir: t.TempDir()}
	e := &env{h: h, p: modes["smoke"], opts: Options{Log: os.Stderr}, sc: &scenario{name: "cluster-test", topo: redisCluster}, clock: clock{start: time.Now()}}
	t.Cleanup(e.teardown)
	proxyEnv := map[string]string{}
	if err := e.startCluster(proxyEnv); err != nil {
		t.Fatal(err)
	}
	if got := proxyEnv["FENCE_REDIS_MIN_REPLICAS"]; got != "1" || strings.Count(proxyEnv["FENCE_REDIS_CLUSTER_ADDRS"], ",") != clusterNodes-1 {
		t.Fatalf("proxy environment %v", proxyEnv)
	}
	// The spread depends on the names and the slot layout alone: the
	// long mode's 12 resources, then the others' 8.
	e.p = modes["long"]
	long, err := e.shards(e.nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	checkSpread(t, long, e.p.resources)
	e.p = modes["smoke"]
	shards, err := e.shards(e.nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	checkSpread(t, shards, e.p.resources)

	cc := e.rc.(*redis.ClusterClient)
	ctx := context.Background()
	for i := range e.p.resources {
		if err := cc.Set(ctx, markKey(resourceName(i)), 10+i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	rd := newReader(cc, e.clock, "fence:", e.p.resources)
	rd.fetchSome = clusterFetch(cc, 1)
	if err := rd.read(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	for i, o := range rd.history() {
		if o.Resource != resourceName(i) || o.Mark != uint64(10+i) {
			t.Fatalf("read %d: %s %d", i, o.Resource, o.Mark)
		}
	}

	sh := shards[0]
	snap, err := rd.replicaSnapshot(sh.replica.Addr(), sh.resources)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range snap {
		if o.Resource != sh.resources[i] || o.Mark != uint64(10+slices.Index(rd.res, o.Resource)) {
			t.Fatalf("replica snapshot %d: %s %d", i, o.Resource, o.Mark)
		}
	}

	if err := sh.master.Kill(); err != nil {
		t.Fatal(err)
	}
	n := len(rd.history())
	err = rd.read(2 * time.Second)
	if err == nil {
		t.Fatal("a read with a master killed returned no error")
	}
	var got []string
	for _, o := range rd.history()[n:] {
		got = append(got, o.Resource)
	}
	var want []string
	for _, s := range shards[1:] {
		want = append(want, s.resources...)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("read %v with the shard of %v down (%v), want the other shards' %v", got, sh.resources, err, want)
	}
}

func checkSpread(t *testing.T, shards []clusterShard, resources int) {
	t.Helper()
	if len(shards) != clusterMasters {
		t.Fatalf("%d shards, want %d", len(shards), clusterMasters)
	}
	n := 0
	for _, s := range shards {
		if len(s.resources) == 0 {
			t.Errorf("a shard holds none of the %d resources: %+v", resources, shards)
		}
		n += len(s.resources)
	}
	if n != resources {
		t.Fatalf("%d resources placed, want %d", n, resources)
	}
	if _, _, err := victimShard(shards); err != nil {
		t.Fatal(err)
	}
}

// TestShardKillJudged: a request for the dead shard's resources sent
// after its master's kill and answered 2xx before its restart is a
// violation, not a fault that failed to show, and so is one for the other
// shards' refused then; refusals and the other shards' admissions are what
// a passing run shows.
func TestShardKillJudged(t *testing.T) {
	k := &shardKill{victim: []string{"r1"}, others: []string{"r0"}, start: 90, dead: 100, back: 200}
	refused := check.Op{Resource: "r1", Outcome: check.Unavailable, Status: 503, Call: 110, Return: 120}
	admitted := check.Op{Resource: "r1", Outcome: check.Admitted, Status: 200, Call: 110, Return: 120}
	before := check.Op{Resource: "r1", Outcome: check.Admitted, Status: 200, Call: 95, Return: 120} // sent before the kill
	other := check.Op{Resource: "r0", Outcome: check.Admitted, Status: 200, Call: 110, Return: 120}
	otherRefused := check.Op{Resource: "r0", Outcome: check.Unavailable, Status: 503, Call: 130, Return: 140}
	for _, tc := range []struct {
		name       string
		ops        []check.Op
		violations int
		problems   int
	}{
		{"fail closed", []check.Op{refused, before, other}, 0, 0},
		{"admitted while down", []check.Op{admitted, other}, 1, 0},
		{"nothing refused", []check.Op{before, other}, 0, 1},
		{"other shards idle", []check.Op{refused}, 0, 1},
		{"other shards refused", []check.Op{refused, other, otherRefused}, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &env{shardKill: k}
			var res Result
			judgeShardKill(e, tc.ops, &res)
			if p := expectShardKill(e, tc.ops); len(res.Violations) != tc.violations || len(p) != tc.problems {
				t.Fatalf("violations %v, problems %v; want %d and %d", res.Violations, p, tc.violations, tc.problems)
			}
		})
	}
}

package main

// End-to-end tests of every documented Redis configuration ("Redis
// beyond one node": TLS, ACL credentials, sentinel, cluster, WAIT for
// replicas, the eviction readiness check) through the real program, against
// real redis-server processes on loopback ports.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// readyz returns the status and body of the program's /readyz.
func readyz(t *testing.T, p *program) (int, string) {
	t.Helper()
	resp, err := http.Get(p.admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// wantAdmitted sends PUT path with token and expects 200, forwarded once.
func wantAdmitted(t *testing.T, p *program, up *countingUpstream, path string, token uint64) {
	t.Helper()
	before := up.n.Load()
	a := put(t, p.data, path, strconv.FormatUint(token, 10))
	if a.status != 200 {
		t.Fatalf("PUT %s token %d: want 200, got %+v", path, token, a)
	}
	if got := up.n.Load() - before; got != 1 {
		t.Fatalf("PUT %s token %d: upstream received %d requests, want 1", path, token, got)
	}
}

// wantStale sends PUT path with token and expects 409 naming mark, with
// nothing forwarded.
func wantStale(t *testing.T, p *program, up *countingUpstream, path string, token, mark uint64) {
	t.Helper()
	before := up.n.Load()
	a := put(t, p.data, path, strconv.FormatUint(token, 10))
	if a.status != 409 || a.problem["type"] != "urn:fenceproxy:stale-token" ||
		a.problem["highWaterMark"] != strconv.FormatUint(mark, 10) {
		t.Fatalf("PUT %s token %d: want 409 stale with mark %d, got %+v", path, token, mark, a)
	}
	if got := up.n.Load() - before; got != 0 {
		t.Fatalf("PUT %s token %d: a stale request reached the upstream (%d)", path, token, got)
	}
}

// wantUnavailable sends PUT path with token and expects 503
// store-unavailable with Retry-After, with nothing forwarded.
func wantUnavailable(t *testing.T, p *program, up *countingUpstream, path string, token uint64) {
	t.Helper()
	before := up.n.Load()
	a := put(t, p.data, path, strconv.FormatUint(token, 10))
	if a.status != 503 || a.retryAfter == "" || a.problem["type"] != "urn:fenceproxy:store-unavailable" {
		t.Fatalf("PUT %s token %d: want 503 store-unavailable, got %+v", path, token, a)
	}
	if got := up.n.Load() - before; got != 0 {
		t.Fatalf("PUT %s token %d: forwarded (%d) although the store failed", path, token, got)
	}
}

// getMark reads key with a short bound through c.
func getMark(t *testing.T, c redis.Cmdable, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v, err := c.Get(ctx, key).Result()
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return v
}

func redisDo(t *testing.T, addr string, base *redis.Options, args ...any) any {
	t.Helper()
	r, err := redistest.Do(addr, base, args...)
	if err != nil {
		t.Fatalf("%s %v: %v", addr, args, err)
	}
	return r
}

// wantNoEvictionAdvice fails if the program advised FENCE_REDIS_EVICTION=warn
// although what failed was reaching Redis at all, not CONFIG GET.
func wantNoEvictionAdvice(t *testing.T, p *program) {
	t.Helper()
	if logs := p.logs.String(); strings.Contains(logs, "set FENCE_REDIS_EVICTION=warn") {
		t.Fatalf("the program blames CONFIG for a server it cannot reach:\n%s", logs)
	}
}

// fenceACL is the least a Redis user needs for fenceproxy: PING (readiness),
// EVALSHA and EVAL on NOSCRIPT (admission), GET and SET (called by the
// admission script, which runs with the caller's permissions), WAIT
// (FENCE_REDIS_MIN_REPLICAS), CONFIG GET (the eviction and persistence
// checks), INFO (the watch of the master's run id and role), on the keys of
// FENCE_KEY_PREFIX only; HMGET and HINCRBY on the generation beside the
// identity record ({fence:}:generation), called by the admission script and
// Ping. The drain barrier adds the in-flight keys beside
// the marks ({fence:<resource>}:inflight), the commands its scripts call on
// them (ZADD, ZREM, ZRANGEBYLEX, PTTL, PEXPIRE, TIME) and its notification
// channel (PUBLISH, SUBSCRIBE on fence:inflight). SCAN finds whether a store
// without an identity record holds marks (at start). A cluster client also needs
// CLUSTER SLOTS and COMMAND (see TestRedisCluster).
var fenceACL = []any{"~fence:*", "~{fence:*", "resetchannels", "&fence:inflight", "-@all",
	"+ping", "+evalsha", "+eval", "+get", "+set", "+wait", "+config|get", "+info", "+hmget", "+hincrby",
	"+zadd", "+zrem", "+zrangebylex", "+zmscore", "+pttl", "+pexpire", "+publish", "+subscribe", "+scan"}

// addFenceUser creates the ACL user fence/secret with fenceACL and extra on
// the server at addr (as the default user).
func addFenceUser(t *testing.T, addr string, extra ...any) {
	t.Helper()
	args := append([]any{"ACL", "SETUSER", "fence", "reset", "on", ">secret"}, fenceACL...)
	redisDo(t, addr, nil, append(args, extra...)...)
}

// wantNoACLDenials fails if the server logged an ACL denial.
func wantNoACLDenials(t *testing.T, addr string, base *redis.Options) {
	t.Helper()
	if r := redisDo(t, addr, base, "ACL", "LOG"); fmt.Sprint(r) != "[]" {
		t.Fatalf("%s ACL LOG: the fence user was refused a command: %v", addr, r)
	}
}

// TLS: rediss:// with FENCE_REDIS_TLS_CA_FILE (a test CA) admits and refuses
// through a TLS-only redis-server, and the mark is where docs/stores.md says;
// redis:// with the CA file also speaks TLS; without the CA file the
// server's certificate does not verify against the system roots, so the
// program is not ready and fails closed.
func TestRedisTLS(t *testing.T) {
	files := redistest.NewTLSFiles(t)
	rs := redistest.StartTLS(t, files)
	up := newCountingUpstream(t)

	p := start(t, map[string]string{
		"FENCE_UPSTREAM_URL":      up.URL,
		"FENCE_REDIS_URL":         rs.URL(),
		"FENCE_REDIS_TLS_CA_FILE": files.CA,
	})
	waitStoreOK(t, p)
	wantAdmitted(t, p, up, "/orders/1", 42)
	wantStale(t, p, up, "/orders/1", 41, 42)

	// The operator's view: redis-cli over TLS.
	if cli, err := exec.LookPath("redis-cli"); err == nil {
		out, err := exec.Command(cli, "--tls", "--cacert", files.CA, "-h", "127.0.0.1",
			"-p", strconv.Itoa(rs.Port()), "GET", "fence:default").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "42" {
			t.Fatalf("redis-cli --tls GET fence:default: %v %q", err, out)
		}
	}
	if got := getMark(t, rs.Client(t), "fence:default"); got != "42" {
		t.Fatalf("fence:default = %q, want 42", got)
	}

	// "TLS is on with rediss:// or when this is set": redis:// + CA file.
	p2 := start(t, map[string]string{
		"FENCE_UPSTREAM_URL":      up.URL,
		"FENCE_REDIS_URL":         "redis://" + rs.Addr() + "/0",
		"FENCE_REDIS_TLS_CA_FILE": files.CA,
	})
	waitStoreOK(t, p2)
	wantAdmitted(t, p2, up, "/orders/1", 43)
	wantStale(t, p2, up, "/orders/1", 42, 43)

	// Without the CA file: the system roots do not know the test CA.
	p3 := start(t, map[string]string{
		"FENCE_UPSTREAM_URL": up.URL,
		"FENCE_REDIS_URL":    rs.URL(),
	})
	wantStoreRefused(t, p3, "x509")
	wantNoEvictionAdvice(t, p3)
	wantUnavailable(t, p3, up, "/orders/1", 44)
	wantUnavailable(t, p3, up, "/orders/1", 41)
	wantStoreRefused(t, p3, "x509")
	if got := getMark(t, rs.Client(t), "fence:default"); got != "43" {
		t.Fatalf("fence:default = %q after refused requests, want 43", got)
	}
}

// TLS with Sentinel: the sentinel and the master speak only TLS. The
// program asks the sentinel for the master and admits on the master, both
// over TLS verified against FENCE_REDIS_TLS_CA_FILE; without the CA file it
// is not ready and fails closed.
func TestRedisSentinelTLS(t *testing.T) {
	files := redistest.NewTLSFiles(t)
	master := redistest.StartTLS(t, files)
	sentinel := redistest.StartTLSSentinel(t, "mymaster", master)
	up := newCountingUpstream(t)
	env := map[string]string{
		"FENCE_UPSTREAM_URL":         up.URL,
		"FENCE_REDIS_SENTINEL_ADDRS": sentinel.Addr(),
		"FENCE_REDIS_MASTER_NAME":    "mymaster",
		"FENCE_REDIS_TLS_CA_FILE":    files.CA,
	}
	p := start(t, env)
	waitStoreOK(t, p)
	wantAdmitted(t, p, up, "/orders/1", 42)
	wantStale(t, p, up, "/orders/1", 41, 42)
	if got := getMark(t, master.Client(t), "fence:default"); got != "42" {
		t.Fatalf("fence:default = %q, want 42", got)
	}

	delete(env, "FENCE_REDIS_TLS_CA_FILE")
	p2 := start(t, env)
	t.Logf("readyz without the CA: %s", wantStoreRefused(t, p2))
	wantUnavailable(t, p2, up, "/orders/1", 43)
	if got := getMark(t, master.Client(t), "fence:default"); got != "42" {
		t.Fatalf("fence:default = %q after a refused request, want 42", got)
	}
}

// ACL: a user with only fenceACL on fence:* keys, the default user disabled;
// redis://fence:secret@ is ready (PING, CONFIG GET) and admits and refuses
// without a single ACL denial; a wrong password is not ready and fails
// closed.
func TestRedisACL(t *testing.T) {
	rs := redistest.Start(t)
	addFenceUser(t, rs.Addr())
	redisDo(t, rs.Addr(), nil, "ACL", "SETUSER", "admin", "on", ">adminpw", "~*", "&*", "+@all")
	redisDo(t, rs.Addr(), nil, "ACL", "SETUSER", "default", "off")
	admin := &redis.Options{Username: "admin", Password: "adminpw"}
	if _, err := redistest.Do(rs.Addr(), nil, "PING"); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("PING without credentials: %v, want NOAUTH (default user off)", err)
	}
	redisDo(t, rs.Addr(), admin, "ACL", "LOG", "RESET")
	up := newCountingUpstream(t)

	p := start(t, map[string]string{
		"FENCE_UPSTREAM_URL": up.URL,
		"FENCE_REDIS_URL":    "redis://fence:secret@" + rs.Addr() + "/0",
	})
	waitStoreOK(t, p) // PING and CONFIG GET maxmemory-policy (eviction=refuse) allowed
	wantAdmitted(t, p, up, "/a", 7)
	wantAdmitted(t, p, up, "/a", 7)
	wantStale(t, p, up, "/a", 6, 7)
	if got := redisDo(t, rs.Addr(), admin, "GET", "fence:default"); got != "7" {
		t.Fatalf("fence:default = %v, want 7", got)
	}
	wantNoACLDenials(t, rs.Addr(), admin)

	p2 := start(t, map[string]string{
		"FENCE_UPSTREAM_URL": up.URL,
		"FENCE_REDIS_URL":    "redis://fence:wrong@" + rs.Addr() + "/0",
	})
	wantStoreRefused(t, p2, "WRONGPASS")
	wantNoEvictionAdvice(t, p2)
	wantUnavailable(t, p2, up, "/a", 8)
	wantUnavailable(t, p2, up, "/a", 6)
	if got := redisDo(t, rs.Addr(), admin, "GET", "fence:default"); got != "7" {
		t.Fatalf("fence:default = %v after refused requests, want 7", got)
	}
}

// Sentinel: a master, two replicas, three sentinels (quorum 2). The program
// (FENCE_REDIS_SENTINEL_ADDRS, FENCE_REDIS_MIN_REPLICAS=1, ACL credentials
// of the data nodes) admits and refuses; the master is SIGKILLed; the
// sentinels promote a replica; while that happens fenced requests get 503 and
// nothing is forwarded; then the program follows the new master: the token
// older than the last admitted one is still refused (the promoted replica
// had the mark), and newer tokens are admitted and acknowledged by the other
// replica.
func TestRedisSentinelFailover(t *testing.T) {
	master := redistest.Start(t)
	r1 := redistest.StartReplica(t, master)
	r2 := redistest.StartReplica(t, master)
	for _, s := range []*redistest.Server{master, r1, r2} {
		// The program must use the credentials it is given: the default
		// user (which sentinels and replication use) cannot run scripts.
		addFenceUser(t, s.Addr())
		redisDo(t, s.Addr(), nil, "ACL", "SETUSER", "default", "-eval", "-evalsha")
	}
	sentinels := redistest.StartSentinels(t, 3, "mymaster", master, redistest.SentinelOptions{Quorum: 2})
	up := newCountingUpstream(t)

	p := start(t, map[string]string{
		"FENCE_UPSTREAM_URL":         up.URL,
		"FENCE_REDIS_SENTINEL_ADDRS": strings.Join(sentinels.Addrs(), ","),
		"FENCE_REDIS_MASTER_NAME":    "mymaster",
		"FENCE_REDIS_USERNAME":       "fence",
		"FENCE_REDIS_PASSWORD":       "secret",
		"FENCE_REDIS_MIN_REPLICAS":   "1",
		"FENCE_REDIS_WAIT_TIMEOUT":   "200ms",
		"FENCE_STORE_TIMEOUT":        "1s",
	})
	waitStoreOK(t, p)
	wantAdmitted(t, p, up, "/x", 41)
	wantAdmitted(t, p, up, "/x", 42)
	wantStale(t, p, up, "/x", 41, 42)
	if got := getMark(t, master.Client(t), "fence:default"); got != "42" {
		t.Fatalf("master fence:default = %q, want 42", got)
	}
	// WAIT 1 guaranteed one replica had 42 before the 200; wait for the
	// other too, so that the outcome does not hang on which one the
	// sentinels promote.
	for _, r := range []*redistest.Server{r1, r2} {
		redistest.Poll(t, 5*time.Second, "replica "+r.Addr()+" has the mark", func() error {
			v, err := redistest.Do(r.Addr(), nil, "GET", "fence:default")
			if v != "42" {
				return fmt.Errorf("GET: %v %v", v, err)
			}
			return nil
		})
	}

	master.Kill()
	t0 := time.Now()
	// From the kill on: 503 (never forwarded) until the program reaches the
	// new master; then the stale token is refused with the old mark. No
	// newer token is sent meanwhile, so the mark must still be 42.
	unavailable := 0
	deadline := t0.Add(30 * time.Second)
	for {
		before := up.n.Load()
		a := put(t, p.data, "/x", "41")
		if up.n.Load() != before {
			t.Fatalf("token 41 forwarded during the failover: %+v", a)
		}
		if a.status == 409 {
			if a.problem["highWaterMark"] != "42" {
				t.Fatalf("41 after failover: %+v (the mark did not survive)", a)
			}
			break
		}
		if a.status != 503 || a.problem["type"] != "urn:fenceproxy:store-unavailable" {
			t.Fatalf("41 during failover: %+v", a)
		}
		unavailable++
		if time.Now().After(deadline) {
			t.Fatalf("token 41 not refused within 30s of the master's death: %+v", a)
		}
		time.Sleep(50 * time.Millisecond)
	}
	refused := time.Since(t0)
	var newMaster string
	redistest.Poll(t, 20*time.Second, "a replica promoted", func() error {
		a, err := sentinels.MasterAddr()
		if err != nil {
			return err
		}
		if a != r1.Addr() && a != r2.Addr() {
			return fmt.Errorf("sentinels name %s", a)
		}
		newMaster = a
		return nil
	})
	redistest.WaitRole(t, newMaster, nil, "master", 10*time.Second)

	// Admission needs the remaining replica to follow the new master and
	// acknowledge (WAIT 1): 503 until then, never forwarded.
	deadline = time.Now().Add(15 * time.Second)
	for {
		before := up.n.Load()
		a := put(t, p.data, "/x", "43")
		forwarded := up.n.Load() - before
		if a.status == 200 && forwarded == 1 {
			break
		}
		if a.status != 503 || forwarded != 0 {
			t.Fatalf("43 after failover: %+v, forwarded %d", a, forwarded)
		}
		unavailable++
		if time.Now().After(deadline) {
			t.Fatalf("43 not admitted within 15s through the new master %s: %+v", newMaster, a)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("master killed: stale token refused again after %v; admitted through the new master %s after %v; "+
		"%d answers 503 meanwhile, none forwarded", refused.Round(time.Millisecond), newMaster,
		time.Since(t0).Round(time.Millisecond), unavailable)
	wantStale(t, p, up, "/x", 42, 43)
	if got := redisDo(t, newMaster, nil, "GET", "fence:default"); got != "43" {
		t.Fatalf("new master %s fence:default = %v, want 43", newMaster, got)
	}
	// The program's watch of the master saw the new run id.
	waitFor(t, "the failover to be noticed", func() bool {
		return strings.Contains(p.logs.String(), "redis server changed") &&
			strings.Contains(body(t, p.admin+"/metrics"), "fenceproxy_redis_master_changes_total 1")
	})
	for _, s := range []*redistest.Server{r1, r2} {
		wantNoACLDenials(t, s.Addr(), nil)
	}
}

// Cluster: three masters; the program, seeded with two of them and given
// ACL credentials, admits and refuses 50 resources spread over the slots of
// all three nodes, and the marks are where docs/stores.md says.
func TestRedisCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	for _, s := range cluster.Nodes {
		// A cluster client also reads the slot map (CLUSTER SLOTS) and the
		// command table (COMMAND, for key positions): without +command
		// go-redis asks again, and logs NOPERM, on every request.
		addFenceUser(t, s.Addr(), "+cluster|slots", "+command")
		redisDo(t, s.Addr(), nil, "ACL", "SETUSER", "default", "-eval", "-evalsha")
	}
	routes := writeRoutes(t, "routes:\n  - name: items\n    path: /items/{id}\n    resource: items/{id}\n")
	up := newCountingUpstream(t)
	addrs := cluster.Addrs()
	p := start(t, map[string]string{
		"FENCE_UPSTREAM_URL":        up.URL,
		"FENCE_REDIS_CLUSTER_ADDRS": addrs[0] + "," + addrs[1],
		"FENCE_REDIS_USERNAME":      "fence",
		"FENCE_REDIS_PASSWORD":      "secret",
		"FENCE_ROUTES_FILE":         routes,
	})
	waitStoreOK(t, p) // also CONFIG GET maxmemory-policy through the cluster client

	const n = 50
	for i := range n {
		wantAdmitted(t, p, up, fmt.Sprintf("/items/%d", i), uint64(1000+i))
	}
	for i := range n {
		path := fmt.Sprintf("/items/%d", i)
		wantStale(t, p, up, path, uint64(999+i), uint64(1000+i))
		wantAdmitted(t, p, up, path, uint64(1000+i)) // >=: the same token again
	}
	cc := cluster.Client(t)
	for i := range n {
		if got := getMark(t, cc, fmt.Sprintf("fence:items/%d", i)); got != strconv.Itoa(1000+i) {
			t.Fatalf("fence:items/%d = %q, want %d", i, got, 1000+i)
		}
	}
	// The marks are spread over every node, including the one the program
	// was not told about.
	onNode := map[string][]int{} // node -> the items whose marks it holds
	for i := range n {
		node, err := cc.MasterForKey(t.Context(), fmt.Sprintf("fence:items/%d", i))
		if err != nil {
			t.Fatal(err)
		}
		onNode[node.Options().Addr] = append(onNode[node.Options().Addr], i)
	}
	for _, s := range cluster.Nodes {
		if len(onNode[s.Addr()]) == 0 {
			t.Fatalf("node %s holds no mark: the resources did not spread over the slots", s.Addr())
		}
		t.Logf("node %s holds %d marks", s.Addr(), len(onNode[s.Addr()]))
		wantNoACLDenials(t, s.Addr(), nil)
	}
	if got := up.n.Load(); got != 2*n {
		t.Fatalf("upstream received %d requests, want %d", got, 2*n)
	}

	// One master loses everything: the next admission on its slots finds
	// its slot's identity record gone (store-lost), and from then on every
	// fenced request is refused, nothing forwarded.
	flushed := cluster.Nodes[2].Addr()
	redisDo(t, flushed, nil, "FLUSHALL")
	i := onNode[flushed][0]
	if a := put(t, p.data, fmt.Sprintf("/items/%d", i), "999"); a.status != 503 || a.problem["type"] != "urn:fenceproxy:store-lost" {
		t.Fatalf("999 after 1000 on the flushed master: %+v, want 503 store-lost", a)
	}
	other := onNode[cluster.Nodes[0].Addr()][0]
	if a := put(t, p.data, fmt.Sprintf("/items/%d", other), strconv.Itoa(2000+other)); a.status != 503 || a.problem["type"] != "urn:fenceproxy:store-lost" {
		t.Fatalf("a fresh token on an intact master after the loss: %+v, want 503 store-lost", a)
	}
	if got := up.n.Load(); got != 2*n {
		t.Fatalf("upstream received %d requests, want %d", got, 2*n)
	}
	for _, s := range cluster.Nodes {
		wantNoACLDenials(t, s.Addr(), nil)
	}

	// A prefix with a '}' outside a hash tag cannot name the identity
	// records of the slots: a configuration error, before serving.
	err := run(t.Context(), []string{"store", "init"}, map[string]string{
		"FENCE_REDIS_CLUSTER_ADDRS": addrs[0], "FENCE_KEY_PREFIX": "fe}nce:",
	}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "FENCE_KEY_PREFIX") {
		t.Fatalf("store init with FENCE_KEY_PREFIX=fe}nce: on a Cluster = %v, want an error naming the variable", err)
	}
}

// FENCE_REDIS_MIN_REPLICAS=1 through the program: admitted while the replica
// acknowledges; with the replica frozen (SIGSTOP) every fenced request gets
// 503 store-unavailable and nothing reaches the upstream; once it resumes,
// admitted again.
func TestRedisMinReplicas(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.StartReplica(t, master)
	up := newCountingUpstream(t)
	p := start(t, map[string]string{
		"FENCE_UPSTREAM_URL":       up.URL,
		"FENCE_REDIS_URL":          master.URL(),
		"FENCE_REDIS_MIN_REPLICAS": "1",
		"FENCE_REDIS_WAIT_TIMEOUT": "100ms",
		"FENCE_STORE_TIMEOUT":      "500ms",
	})
	waitStoreOK(t, p)
	wantAdmitted(t, p, up, "/m", 10)
	wantAdmitted(t, p, up, "/m", 10)
	wantStale(t, p, up, "/m", 9, 10)

	replica.Stop()
	wantUnavailable(t, p, up, "/m", 11)
	wantUnavailable(t, p, up, "/m", 11)
	wantUnavailable(t, p, up, "/m", 12)
	// A refusal would report mark 12, which only the primary has (its
	// admission answered 503): unacknowledged, it is a 503 too, so no client
	// is told of a mark a failover could take back.
	wantUnavailable(t, p, up, "/m", 9)
	if !strings.Contains(p.logs.String(), "0 of 1 replicas acknowledged") {
		t.Fatalf("the log does not say why:\n%s", p.logs)
	}
	replica.Cont()

	waitFor(t, "admission after SIGCONT", func() bool {
		before := up.n.Load()
		a := put(t, p.data, "/m", "13")
		if a.status != 200 && (a.status != 503 || up.n.Load() != before) {
			t.Fatalf("13 after SIGCONT: %+v", a)
		}
		return a.status == 200
	})
	wantStale(t, p, up, "/m", 12, 13)
	if got := getMark(t, replica.Client(t), "fence:default"); got != "13" {
		t.Fatalf("replica fence:default = %q, want 13", got)
	}
}

// FENCE_REDIS_EVICTION: an allkeys-* policy makes the program not ready
// (refuse, the default) with the policy named, or only warns (warn); a
// volatile-* policy cannot evict marks (they have no TTL) and is ready; a
// server that hides CONFIG cannot be checked, so refuse is not ready and says
// to set warn.
func TestRedisEvictionCheck(t *testing.T) {
	up := newCountingUpstream(t)
	allkeys := redistest.Start(t, "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru")
	env := func(url string, extra ...string) map[string]string {
		m := map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_REDIS_URL": url}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}

	t.Run("allkeys refuse", func(t *testing.T) {
		p := start(t, env(allkeys.URL()))
		t.Logf("readyz: %s", wantStoreRefused(t, p, "maxmemory-policy is allkeys-lru"))
	})
	t.Run("allkeys warn", func(t *testing.T) {
		p := start(t, env(allkeys.URL(), "FENCE_REDIS_EVICTION", "warn"))
		waitStoreOK(t, p)
		logs := p.logs.String()
		if !strings.Contains(logs, `"level":"warn"`) || !strings.Contains(logs, "FENCE_REDIS_EVICTION=warn") ||
			!strings.Contains(logs, "allkeys-lru") {
			t.Fatalf("no warning naming the policy in the log:\n%s", logs)
		}
	})
	t.Run("allkeys off", func(t *testing.T) {
		p := start(t, env(allkeys.URL(), "FENCE_REDIS_EVICTION", "off"))
		waitStoreOK(t, p)
	})
	t.Run("volatile refuse", func(t *testing.T) {
		rs := redistest.Start(t, "--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru")
		p := start(t, env(rs.URL()))
		waitStoreOK(t, p)
		wantAdmitted(t, p, up, "/v", 1)
		if ttl := redisDo(t, rs.Addr(), nil, "PTTL", "fence:default"); ttl != int64(-1) {
			t.Fatalf("PTTL fence:default = %v, want -1 (no TTL, so volatile-* never evicts it)", ttl)
		}
	})
	t.Run("config renamed refuse", func(t *testing.T) {
		rs := redistest.Start(t, "--rename-command", "CONFIG", "")
		p := start(t, env(rs.URL()))
		t.Logf("readyz: %s", wantStoreRefused(t, p, "FENCE_REDIS_EVICTION=warn"))
	})
}

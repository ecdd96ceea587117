package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore/etcdtest"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// generationHooks look for a loss every 100ms, so that tests see the watch
// act at once.
var generationHooks = serveHooks{settingsEvery: 200 * time.Millisecond, identityEvery: 100 * time.Millisecond}

func cli(t *testing.T, env map[string]string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, env, &out, &errOut)
	return out.String() + errOut.String(), err
}

func mustCLI(t *testing.T, env map[string]string, args ...string) {
	t.Helper()
	if out, err := cli(t, env, args...); err != nil {
		t.Fatalf("fenceproxy %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func storeLost(t *testing.T, p *program) bool {
	return strings.Contains(body(t, p.admin+"/metrics"), "\nfenceproxy_store_lost 1")
}

func wantPut(t *testing.T, p *program, name, token string, status int, problem string) {
	t.Helper()
	a := put(t, p.data, "/r", token)
	if a.status != status || (problem != "" && a.problem["type"] != problem) {
		t.Fatalf("%s: token %s = %+v, want %d %s", name, token, a, status, problem)
	}
}

// Redis restored from an older RDB, with the real program as four
// replicas: warm (saw the newer generation and asks first), behind (saw
// only what the backup holds), idle (saw the newer generation, then asks
// nothing) and cold (started after the restore). The idle one reports the
// loss from its watch alone; the warm one refuses the stale token 15 (503
// store-lost) and marks the store lost, so the one behind and the cold
// one refuse it too; nothing stale reaches the upstream. Then the
// runbook: raise the mark, force a record, and every replica resumes.
func TestRedisRestoredFromOlderRDB(t *testing.T) {
	rs := redistest.Start(t)
	up := newCountingUpstream(t)
	env := map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_REDIS_URL": rs.URL()}
	warm, behind, idle := startWith(t, env, generationHooks), startWith(t, env, generationHooks), startWith(t, env, generationHooks)
	for _, p := range []*program{warm, behind, idle} {
		waitStoreOK(t, p)
	}
	if out, err := cli(t, env, "store", "init", "--force"); err == nil || !strings.Contains(out+err.Error(), "not lost") {
		t.Fatalf("store init --force on an intact store: %v\n%s", err, out)
	}
	for name, p := range map[string]*program{"warm": warm, "behind": behind, "idle": idle} {
		wantPut(t, p, name, "10", 200, "")
	}
	redisDo(t, rs.Addr(), nil, "SAVE")
	dump, backup := filepath.Join(rs.Dir(), "dump.rdb"), filepath.Join(t.TempDir(), "backup.rdb")
	copyFile(t, dump, backup)
	wantPut(t, warm, "warm", "20", 200, "")
	wantPut(t, idle, "idle", "20", 200, "")

	rs.Kill()
	copyFile(t, backup, dump)
	rs.Restart(t) // the mark is 10 again, and so is the generation
	waitFor(t, "the idle replica reporting the loss without a request", func() bool { return storeLost(t, idle) })
	wantPut(t, warm, "warm", "15", 503, "urn:fenceproxy:store-lost")
	wantPut(t, behind, "behind", "15", 503, "urn:fenceproxy:store-lost")
	cold := startWith(t, env, generationHooks)
	wantPut(t, cold, "cold", "15", 503, "urn:fenceproxy:store-lost")
	for name, p := range map[string]*program{"warm": warm, "behind": behind, "idle": idle, "cold": cold} {
		if !storeLost(t, p) {
			t.Fatalf("%s: fenceproxy_store_lost is not 1", name)
		}
	}
	if n := up.n.Load(); n != 5 {
		t.Fatalf("upstream saw %d requests, want 5 (three 10s, two 20s)", n)
	}

	// The runbook: raise to the lease service's current token, force.
	mustCLI(t, env, "marks", "raise", "default", "20")
	mustCLI(t, env, "store", "init", "--force")
	for name, p := range map[string]*program{"warm": warm, "behind": behind, "idle": idle, "cold": cold} {
		waitFor(t, name+" resuming", func() bool { return !storeLost(t, p) })
		wantPut(t, p, name, "15", 409, "urn:fenceproxy:stale-token")
		wantPut(t, p, name, "21", 200, "")
	}
}

// An operator's reset is authoritative over every replica's remembered
// marks, on each store that replicas share: two replicas saw 615; after
// marks reset to 100, token 101 is admitted by both (neither raises the
// mark back to 615), and 100 is then refused against 101; a raise is the
// operator's word too (a replica remembering 101 admits nothing below the
// raised mark, and 103 once it is above).
func TestMarksResetOverRememberedMarks(t *testing.T) {
	for _, tc := range sharedStores {
		t.Run(tc.name, func(t *testing.T) {
			env := tc.env(t)
			env["FENCE_UPSTREAM_URL"] = newCountingUpstream(t).URL
			a, b := startWith(t, env, generationHooks), startWith(t, env, generationHooks)
			waitStoreOK(t, a)
			waitStoreOK(t, b)
			wantPut(t, a, "a", "615", 200, "")
			wantPut(t, b, "b", "615", 200, "")
			mustCLI(t, env, "marks", "reset", "--force", "default", "100")
			wantPut(t, a, "a", "101", 200, "")
			wantPut(t, b, "b", "101", 200, "")
			wantPut(t, b, "b", "100", 409, "urn:fenceproxy:stale-token")
			if out, _ := cli(t, env, "marks", "get", "default"); !strings.HasPrefix(out, "default 101\n") {
				t.Fatalf("marks get after the reset: %q, want 101 (not raised back to 615)", out)
			}
			mustCLI(t, env, "marks", "raise", "default", "102")
			wantPut(t, a, "a", "102", 200, "")
			wantPut(t, b, "b", "101", 409, "urn:fenceproxy:stale-token")
			wantPut(t, b, "b", "103", 200, "")
		})
	}
}

// Recovery never strands a replica: after a flush, the busy replica finds
// the loss on a request and the idle one from its watch; after the force,
// both resume (the idle one without having served a request in between);
// a second force resumes them again.
func TestRecoveryResumesEveryReplica(t *testing.T) {
	rs := redistest.Start(t)
	up := newCountingUpstream(t)
	env := map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_REDIS_URL": rs.URL()}
	busy, idle := startWith(t, env, generationHooks), startWith(t, env, generationHooks)
	waitStoreOK(t, busy)
	waitStoreOK(t, idle)
	wantPut(t, busy, "busy", "42", 200, "")
	redisDo(t, rs.Addr(), nil, "FLUSHALL")
	wantPut(t, busy, "busy", "41", 503, "urn:fenceproxy:store-lost")
	waitFor(t, "the idle replica reporting the loss", func() bool { return storeLost(t, idle) })
	mustCLI(t, env, "marks", "raise", "default", "42")
	for round := range 2 {
		mustCLI(t, env, "store", "init", "--force")
		for name, p := range map[string]*program{"busy": busy, "idle": idle} {
			waitFor(t, name+" resuming", func() bool { return !storeLost(t, p) })
			wantPut(t, p, name, "41", 409, "urn:fenceproxy:stale-token")
			wantPut(t, p, name, "42", 200, "")
		}
		_ = round
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Two deployments whose prefixes nest on one Redis, or one etcd: whichever
// starts second is refused (503, naming FENCE_KEY_PREFIX, or finding marks
// that are not its own without an identity record), never sharing marks.
func TestNestedPrefixesRefused(t *testing.T) {
	for _, store := range sharedStores {
		for _, order := range [][2]string{{"fence:", "fence:billing:"}, {"fence:billing:", "fence:"}} {
			t.Run(store.name+"/"+order[0]+" first", func(t *testing.T) {
				base := store.env(t)
				up := newCountingUpstream(t)
				env := func(prefix string) map[string]string {
					e := map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_KEY_PREFIX": prefix}
					for k, v := range base {
						e[k] = v
					}
					return e
				}
				first := startWith(t, env(order[0]), generationHooks)
				waitStoreOK(t, first)
				wantPut(t, first, "first", "5", 200, "")
				second := startWith(t, env(order[1]), generationHooks)
				a := put(t, second.data, "/r", "5")
				detail, _ := a.problem["detail"].(string)
				if a.status != 503 || (!strings.Contains(detail, "FENCE_KEY_PREFIX") && !strings.Contains(detail, "marks but no identity record")) {
					t.Fatalf("second deployment (%s): %+v, want 503 naming the prefix", order[1], a)
				}
				if n := up.n.Load(); n != 1 {
					t.Fatalf("upstream saw %d requests, want 1", n)
				}
			})
		}
	}
}

// sharedStores are the stores that several replicas share, each as the
// environment that points a replica at a fresh server of its own.
var sharedStores = []struct {
	name string
	env  func(t *testing.T) map[string]string
}{
	{"redis", func(t *testing.T) map[string]string {
		return map[string]string{"FENCE_REDIS_URL": redistest.Start(t).URL()}
	}},
	{"etcd", func(t *testing.T) map[string]string {
		return map[string]string{"FENCE_STORE": "etcd", "FENCE_ETCD_ENDPOINTS": strings.Join(etcdtest.Start(t).Endpoints(), ",")}
	}},
}

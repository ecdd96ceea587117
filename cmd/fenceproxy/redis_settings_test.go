package main

// End-to-end tests of the Redis settings checks (FENCE_REDIS_EVICTION,
// FENCE_REDIS_PERSISTENCE) through the real program: with refuse, a setting
// that can lose marks makes the program unready and every fenced request a
// 503 naming the setting, with nothing forwarded; the refusal follows the
// server's settings as they change at runtime.

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// wantRefusedUnsafe sends PUT path with token and expects 503
// store-unavailable whose detail names setting, with nothing forwarded.
func wantRefusedUnsafe(t *testing.T, p *program, up *countingUpstream, path string, token uint64, setting string) {
	t.Helper()
	before := up.n.Load()
	a := put(t, p.data, path, strconv.FormatUint(token, 10))
	if a.status != 503 || a.problem["type"] != "urn:fenceproxy:store-unavailable" {
		t.Fatalf("PUT %s token %d: want 503 store-unavailable, got %+v", path, token, a)
	}
	if got := up.n.Load() - before; got != 0 {
		t.Fatalf("PUT %s token %d: forwarded (%d) although the store is refused as unsafe", path, token, got)
	}
	if detail, _ := a.problem["detail"].(string); !strings.Contains(detail, setting) {
		t.Fatalf("PUT %s token %d: the detail %q does not name %s", path, token, detail, setting)
	}
}

// wantNoMark fails if key exists on the server at addr: a refused request
// must not have reached the store either.
func wantNoMark(t *testing.T, c redis.Cmdable, key string) {
	t.Helper()
	if v, err := c.Get(t.Context(), key).Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET %s = %q, %v; want no mark", key, v, err)
	}
}

// FENCE_REDIS_EVICTION=refuse (the default) with an evicting policy: not
// ready, and every fenced request 503 naming maxmemory-policy, not only the
// pod's readiness; fixed at runtime (CONFIG SET noeviction) the program
// admits again; broken again, it refuses again.
func TestRedisEvictionRefuseRefusesAdmissions(t *testing.T) {
	rs := redistest.Start(t, "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru",
		"--appendonly", "yes", "--appendfsync", "always")
	up := newCountingUpstream(t)
	p := start(t, map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_REDIS_URL": rs.URL()})

	wantStoreRefused(t, p, "maxmemory-policy is allkeys-lru")
	wantRefusedUnsafe(t, p, up, "/orders/1", 41, "maxmemory-policy")
	wantRefusedUnsafe(t, p, up, "/orders/1", 42, "allkeys-lru")
	wantNoMark(t, rs.Client(t), "fence:default")
	if !strings.Contains(p.logs.String(), "FENCE_REDIS_EVICTION=refuse") {
		t.Fatalf("the log does not say why:\n%s", p.logs)
	}

	redisDo(t, rs.Addr(), nil, "CONFIG", "SET", "maxmemory-policy", "noeviction")
	waitStoreOK(t, p)
	wantAdmitted(t, p, up, "/orders/1", 42)
	wantStale(t, p, up, "/orders/1", 41, 42)

	redisDo(t, rs.Addr(), nil, "CONFIG", "SET", "maxmemory-policy", "allkeys-lfu")
	waitStoreRefused(t, p, "maxmemory-policy is allkeys-lfu")
	wantRefusedUnsafe(t, p, up, "/orders/1", 43, "allkeys-lfu")
	if got := getMark(t, rs.Client(t), "fence:default"); got != "42" {
		t.Fatalf("fence:default = %q after refused requests, want 42", got)
	}
}

// A Redis restarted with other settings (CONFIG SET is not kept across a
// restart) is checked again as soon as the program sees the new run id, not
// at the next period (an hour here): the refusal comes back.
func TestRedisSettingsCheckedAfterRestart(t *testing.T) {
	rs := redistest.Start(t, "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru",
		"--appendonly", "yes", "--appendfsync", "always")
	redisDo(t, rs.Addr(), nil, "CONFIG", "SET", "maxmemory-policy", "noeviction")
	up := newCountingUpstream(t)
	p := startWith(t, map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_REDIS_URL": rs.URL()},
		serveHooks{settingsEvery: time.Hour})
	waitStoreOK(t, p)
	wantAdmitted(t, p, up, "/r", 1)

	rs.Kill()
	rs.Restart(t) // with its command line: allkeys-lru again
	waitStoreRefused(t, p, "maxmemory-policy is allkeys-lru")
	wantRefusedUnsafe(t, p, up, "/r", 2, "maxmemory-policy")
	if got := getMark(t, rs.Client(t), "fence:default"); got != "1" {
		t.Fatalf("fence:default = %q after the refused request, want 1", got)
	}
}

// FENCE_REDIS_PERSISTENCE=refuse: appendfsync everysec, then appendonly no,
// each refuse every fenced request with the setting named; appendonly yes
// with appendfsync always admits.
func TestRedisPersistenceRefuse(t *testing.T) {
	rs := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "everysec")
	up := newCountingUpstream(t)
	p := start(t, map[string]string{
		"FENCE_UPSTREAM_URL":      up.URL,
		"FENCE_REDIS_URL":         rs.URL(),
		"FENCE_REDIS_PERSISTENCE": "refuse",
	})
	wantStoreRefused(t, p, "appendfsync is everysec")
	wantRefusedUnsafe(t, p, up, "/p", 7, "appendfsync")
	wantNoMark(t, rs.Client(t), "fence:default")

	redisDo(t, rs.Addr(), nil, "CONFIG", "SET", "appendfsync", "always")
	waitStoreOK(t, p)
	wantAdmitted(t, p, up, "/p", 7)

	redisDo(t, rs.Addr(), nil, "CONFIG", "SET", "appendonly", "no")
	waitStoreRefused(t, p, "appendonly is no")
	wantRefusedUnsafe(t, p, up, "/p", 8, "appendonly")
	if got := getMark(t, rs.Client(t), "fence:default"); got != "7" {
		t.Fatalf("fence:default = %q after refused requests, want 7", got)
	}
}

// FENCE_REDIS_PERSISTENCE=warn (the default) logs what each setting can lose
// and admits; off does not look.
func TestRedisPersistenceWarn(t *testing.T) {
	up := newCountingUpstream(t)
	for _, tc := range []struct {
		name string
		args []string
		want string // in the warning; "" = no warning
	}{
		{"appendonly no", []string{"--appendonly", "no"}, "since the last RDB snapshot"},
		{"everysec", []string{"--appendonly", "yes", "--appendfsync", "everysec"}, "about a second"},
		{"fsync no", []string{"--appendonly", "yes", "--appendfsync", "no"}, "not yet written to disk"},
		{"always", []string{"--appendonly", "yes", "--appendfsync", "always"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := redistest.Start(t, tc.args...)
			p := start(t, map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_REDIS_URL": rs.URL()})
			waitStoreOK(t, p)
			wantAdmitted(t, p, up, "/w", 1)
			logs := p.logs.String()
			warned := strings.Contains(logs, "FENCE_REDIS_PERSISTENCE=warn")
			if tc.want == "" {
				if warned {
					t.Fatalf("a warning for a safe setting:\n%s", logs)
				}
				return
			}
			if !warned || !strings.Contains(logs, tc.want) || !strings.Contains(logs, `"level":"warn"`) {
				t.Fatalf("no warning saying %q:\n%s", tc.want, logs)
			}
		})
	}
	t.Run("off", func(t *testing.T) {
		rs := redistest.Start(t, "--appendonly", "no")
		p := start(t, map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_REDIS_URL": rs.URL(),
			"FENCE_REDIS_PERSISTENCE": "off"})
		waitStoreOK(t, p)
		wantAdmitted(t, p, up, "/w", 2)
		if logs := p.logs.String(); strings.Contains(logs, "FENCE_REDIS_PERSISTENCE") {
			t.Fatalf("off still checks:\n%s", logs)
		}
	})
}

// A server that hides CONFIG (as managed services do) cannot be checked:
// with warn the program says so and advises off once the operator knows the
// setting; with refuse it is not ready, refuses every fenced request, and
// advises warn or off.
func TestRedisSettingsConfigDisabled(t *testing.T) {
	rs := redistest.Start(t, "--rename-command", "CONFIG", "")
	up := newCountingUpstream(t)

	t.Run("warn", func(t *testing.T) {
		p := start(t, map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_REDIS_URL": rs.URL(),
			"FENCE_REDIS_EVICTION": "off"})
		waitStoreOK(t, p)
		wantAdmitted(t, p, up, "/c", 1)
		logs := p.logs.String()
		if !strings.Contains(logs, "refuses CONFIG GET") || !strings.Contains(logs, "FENCE_REDIS_PERSISTENCE=off") {
			t.Fatalf("the log does not say that CONFIG is refused and what to do:\n%s", logs)
		}
		// The persistence warning quotes the server's refusal of the
		// persistence settings, not of the eviction check's.
		for _, line := range strings.Split(logs, "\n") {
			if strings.Contains(line, "FENCE_REDIS_PERSISTENCE=warn") &&
				(strings.Contains(line, "maxmemory-policy") || !strings.Contains(line, "'appendonly'")) {
				t.Errorf("the persistence warning quotes another check's setting, or not its own:\n%s", line)
			}
		}
	})
	t.Run("refuse", func(t *testing.T) {
		p := start(t, map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_REDIS_URL": rs.URL(),
			"FENCE_REDIS_EVICTION": "off", "FENCE_REDIS_PERSISTENCE": "refuse"})
		wantStoreRefused(t, p, "FENCE_REDIS_PERSISTENCE=warn")
		wantRefusedUnsafe(t, p, up, "/c", 2, "appendfsync")
	})
}

// FENCE_REDIS_SETTINGS states the settings of a server that refuses CONFIG
// GET: judged in their place, so that a managed Redis is not refused
// forever; a statement of safe settings admits, and the log says they were
// asserted, not read; a statement of an evicting policy refuses as a
// reading would. On a server whose CONFIG GET answers, what it reports
// counts and a statement that differs is a warning.
func TestRedisSettingsStated(t *testing.T) {
	renamed := redistest.Start(t, "--rename-command", "CONFIG", "")
	up := newCountingUpstream(t)
	for _, tc := range []struct {
		name, stated string
		refused      string // in the refusal; "" = admitted
		log          string
	}{
		{"safe", "maxmemory-policy=noeviction,appendonly=yes,appendfsync=always", "",
			"settings asserted, not read: Redis maxmemory-policy noeviction cannot evict marks (as FENCE_REDIS_SETTINGS states it"},
		{"evicting", "maxmemory-policy=allkeys-lru,appendonly=yes,appendfsync=always", "maxmemory-policy is allkeys-lru",
			"as FENCE_REDIS_SETTINGS states it"},
		{"not fsynced", "maxmemory-policy=volatile-lru,appendonly=yes,appendfsync=everysec", "appendfsync is everysec",
			"as FENCE_REDIS_SETTINGS states it"},
		// Persistence not stated: not read either, so refused as before.
		{"persistence not stated", "maxmemory-policy=noeviction", "cannot read Redis appendonly", "refuses CONFIG GET"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := start(t, map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_REDIS_URL": renamed.URL(),
				"FENCE_REDIS_PERSISTENCE": "refuse", "FENCE_REDIS_SETTINGS": tc.stated})
			if tc.refused == "" {
				waitStoreOK(t, p)
				wantAdmitted(t, p, up, "/s/"+tc.name, 1)
			} else {
				waitStoreRefused(t, p, tc.refused)
				wantRefusedUnsafe(t, p, up, "/s/"+tc.name, 1, tc.refused)
			}
			if logs := p.logs.String(); !strings.Contains(logs, tc.log) {
				t.Errorf("the log does not say %q:\n%s", tc.log, logs)
			}
		})
	}

	t.Run("readable, stated otherwise", func(t *testing.T) {
		rs := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "everysec")
		p := start(t, map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_REDIS_URL": rs.URL(),
			"FENCE_REDIS_PERSISTENCE": "refuse", "FENCE_REDIS_SETTINGS": "maxmemory-policy=noeviction,appendonly=yes,appendfsync=always"})
		waitStoreRefused(t, p, "appendfsync is everysec")
		wantRefusedUnsafe(t, p, up, "/s/read", 1, "appendfsync is everysec")
		waitFor(t, "the warning that the statement differs", func() bool {
			return strings.Contains(p.logs.String(), "FENCE_REDIS_SETTINGS differs from what Redis reports (appendfsync stated always, read everysec)")
		})
	})
}

// Cluster: the check asks every master. One master switched to an evicting
// policy at runtime refuses every fenced request (the program cannot tell
// which resources that master holds without asking per request); switched
// back, the program admits again.
func TestRedisClusterSettingsCheck(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	up := newCountingUpstream(t)
	addrs := cluster.Addrs()
	p := start(t, map[string]string{
		"FENCE_UPSTREAM_URL":        up.URL,
		"FENCE_REDIS_CLUSTER_ADDRS": addrs[0],
		"FENCE_REDIS_PERSISTENCE":   "off",
	})
	waitStoreOK(t, p)
	wantAdmitted(t, p, up, "/k", 5)

	// The node the program was not told about.
	redisDo(t, addrs[2], nil, "CONFIG", "SET", "maxmemory-policy", "allkeys-random")
	waitStoreRefused(t, p, "maxmemory-policy is allkeys-random, which can evict marks, on 1 of 3 masters")
	wantRefusedUnsafe(t, p, up, "/k", 6, "maxmemory-policy")

	redisDo(t, addrs[2], nil, "CONFIG", "SET", "maxmemory-policy", "noeviction")
	waitStoreOK(t, p)
	wantAdmitted(t, p, up, "/k", 6)
}

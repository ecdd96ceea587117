package main

// End-to-end tests of readiness against a real redis-server: a store that
// is down or unsafe refuses fenced requests (503, nothing forwarded) while
// reads keep flowing and /readyz stays 200, unless
// FENCE_READY_REQUIRES_STORE=true; the store's state is on /status.json and
// in fenceproxy_store_up and fenceproxy_store_state.

import (
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

func TestStoreTroubleKeepsReadsFlowing(t *testing.T) {
	for _, tc := range []struct {
		name     string
		requires string // FENCE_READY_REQUIRES_STORE; "" leaves it unset
		trouble  string // down: Redis stopped; unsafe: an evicting policy
		state    string
		reason   string // in /readyz's 503 with requires
	}{
		{"down", "", "down", "down", "fence store: "},
		{"down, ready requires the store", "true", "down", "down", "fence store: "},
		{"unsafe", "", "unsafe", "unsafe", "maxmemory-policy is allkeys-lru"},
		{"unsafe, ready requires the store", "true", "unsafe", "unsafe", "maxmemory-policy is allkeys-lru"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
			up := newCountingUpstream(t)
			env := map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_REDIS_URL": rs.URL(), "FENCE_STORE_TIMEOUT": "200ms"}
			if tc.requires != "" {
				env["FENCE_READY_REQUIRES_STORE"] = tc.requires
			}
			p := start(t, env)
			waitStoreOK(t, p)
			wantAdmitted(t, p, up, "/orders/1", 42)

			switch tc.trouble {
			case "down":
				rs.Kill()
			case "unsafe":
				redisDo(t, rs.Addr(), nil, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
			}
			waitFor(t, "store "+tc.state, func() bool { state, _ := storeVerdict(t, p); return state == tc.state })

			before := up.n.Load()
			if s := status(t, p.data+"/orders/1"); s != 200 || up.n.Load()-before != 1 {
				t.Fatalf("GET with the store %s: %d, forwarded %d; want 200, forwarded", tc.state, s, up.n.Load()-before)
			}
			if tc.trouble == "down" {
				wantUnavailable(t, p, up, "/orders/1", 43)
			} else {
				wantRefusedUnsafe(t, p, up, "/orders/1", 43, "allkeys-lru")
			}

			code, text := readyz(t, p)
			switch {
			case tc.requires == "" && (code != 200 || !strings.Contains(text, "fence store is "+tc.state)):
				t.Errorf("readyz with the store %s: %d %q; want 200 saying the store is %s", tc.state, code, text, tc.state)
			case tc.requires == "true" && (code != 503 || !strings.Contains(text, tc.reason)):
				t.Errorf("readyz with the store %s and FENCE_READY_REQUIRES_STORE=true: %d %q; want 503 naming %q",
					tc.state, code, text, tc.reason)
			}
			metrics := body(t, p.admin+"/metrics")
			storeUp := map[string]string{"down": "0", "unsafe": "1"}[tc.state]
			for _, line := range []string{`fenceproxy_store_state{state="` + tc.state + `"} 1`, `fenceproxy_store_state{state="ok"} 0`,
				"fenceproxy_store_up " + storeUp} {
				if !strings.Contains(metrics, line) {
					t.Errorf("metrics lack %s", line)
				}
			}
			logged := map[string]string{"down": "fence store down: a fenced request gets 503 when the store cannot answer it",
				"unsafe": "fence store unsafe: every fenced request gets 503"}[tc.state]
			if !strings.Contains(p.logs.String(), logged) {
				t.Errorf("the log does not say the store is %s:\n%s", tc.state, p.logs)
			}

			switch tc.trouble {
			case "down":
				rs.Restart(t)
			case "unsafe":
				redisDo(t, rs.Addr(), nil, "CONFIG", "SET", "maxmemory-policy", "noeviction")
			}
			waitStoreOK(t, p)
			if code, text := readyz(t, p); code != 200 || text != "ready" {
				t.Errorf("readyz with the store ok again: %d %q", code, text)
			}
			wantAdmitted(t, p, up, "/orders/1", 43)
		})
	}
}

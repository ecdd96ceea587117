package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// The store's client speaks RESP2 unless FENCE_REDIS_URL says protocol=3:
// every connection the program opens to the data node (admissions,
// releases, the barrier's subscription, the settings and master watches)
// reports the RESP version it speaks in CLIENT LIST, read once a fenced
// request was admitted.
func TestRedisProtocol(t *testing.T) {
	for _, tc := range []struct {
		name  string
		query string // appended to the URL; "sentinel": through a sentinel
		want  string
	}{
		{"url default", "", "resp=2"},
		{"url protocol=2", "?protocol=2", "resp=2"},
		{"url protocol=3", "?protocol=3", "resp=3"},
		{"sentinel", "sentinel", "resp=2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := redistest.Start(t)
			up := newCountingUpstream(t)
			env := map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_STORE_TIMEOUT": "1s"}
			if tc.query == "sentinel" {
				sentinels := redistest.StartSentinels(t, 1, "mymaster", rs, redistest.SentinelOptions{Quorum: 1})
				env["FENCE_REDIS_SENTINEL_ADDRS"] = strings.Join(sentinels.Addrs(), ",")
				env["FENCE_REDIS_MASTER_NAME"] = "mymaster"
			} else {
				env["FENCE_REDIS_URL"] = rs.URL() + tc.query
			}
			p := start(t, env)
			waitStoreOK(t, p)
			wantAdmitted(t, p, up, "/x", 41)
			list, ok := redisDo(t, rs.Addr(), nil, "CLIENT", "LIST").(string)
			if !ok {
				t.Fatalf("CLIENT LIST answered %T", list)
			}
			var scripts int
			for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
				fields := strings.Fields(line)
				if slices.Contains(fields, "cmd=client|list") {
					continue // this test's own
				}
				if !slices.Contains(fields, tc.want) {
					t.Errorf("a connection does not speak %s: %s", tc.want, line)
				}
				if slices.Contains(fields, "cmd=evalsha") || slices.Contains(fields, "cmd=eval") {
					scripts++
				}
			}
			if scripts == 0 {
				t.Errorf("no connection ran the admission script:\n%s", list)
			}
		})
	}
}

// A protocol= other than 2 or 3 is a configuration error naming the
// variable, before any connection: go-redis would otherwise send HELLO
// with it on every dial and fail each one.
func TestRedisProtocolRefused(t *testing.T) {
	for _, q := range []string{"protocol=1", "protocol=4"} {
		_, err := redisClient(&config.Redis{URL: "redis://127.0.0.1:1/0?" + q})
		if err == nil || !strings.HasPrefix(err.Error(), "FENCE_REDIS_URL: ") {
			t.Errorf("%s: err = %v, want one naming FENCE_REDIS_URL", q, err)
		}
	}
}

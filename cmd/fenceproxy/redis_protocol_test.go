package main

import (
	"slices"
	"strconv"
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
		query string // appended to the URL; "sentinel" or "cluster": that topology
		want  string
	}{
		{"url default", "", "resp=2"},
		{"url protocol=2", "?protocol=2", "resp=2"},
		{"url protocol=3", "?protocol=3", "resp=3"},
		{"sentinel", "sentinel", "resp=2"},
		{"cluster", "cluster", "resp=2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newCountingUpstream(t)
			routes := writeRoutes(t, "routes:\n  - name: items\n    path: /items/{id}\n    resource: items/{id}\n")
			env := map[string]string{"FENCE_UPSTREAM_URL": up.URL, "FENCE_STORE_TIMEOUT": "1s", "FENCE_ROUTES_FILE": routes}
			var nodes []string // the data nodes whose clients are read
			switch tc.query {
			case "cluster":
				cluster := redistest.StartCluster(t, 3)
				nodes = cluster.Addrs()
				env["FENCE_REDIS_CLUSTER_ADDRS"] = nodes[0]
				env["FENCE_REDIS_PERSISTENCE"] = "off"
			case "sentinel":
				rs := redistest.Start(t)
				nodes = []string{rs.Addr()}
				sentinels := redistest.StartSentinels(t, 1, "mymaster", rs, redistest.SentinelOptions{Quorum: 1})
				env["FENCE_REDIS_SENTINEL_ADDRS"] = strings.Join(sentinels.Addrs(), ",")
				env["FENCE_REDIS_MASTER_NAME"] = "mymaster"
			default:
				rs := redistest.Start(t)
				nodes = []string{rs.Addr()}
				env["FENCE_REDIS_URL"] = rs.URL() + tc.query
			}
			p := start(t, env)
			waitStoreOK(t, p)
			// Resources spread over the slots, so that on a Cluster every
			// master runs the admission script.
			for i := range 30 {
				wantAdmitted(t, p, up, "/items/"+strconv.Itoa(i), 41)
			}
			for _, node := range nodes {
				// The script ran there (counted by the server: a
				// connection's cmd= is only its latest command, which the
				// identity watch may have replaced since), and every
				// connection, the pooled admission ones among them,
				// speaks tc.want.
				stats, err := redistest.Info(node, nil, "commandstats")
				if err != nil {
					t.Fatal(err)
				}
				if stats["cmdstat_evalsha"] == "" && stats["cmdstat_eval"] == "" {
					t.Errorf("%s ran no admission script", node)
				}
				list, ok := redisDo(t, node, nil, "CLIENT", "LIST").(string)
				if !ok {
					t.Fatalf("CLIENT LIST of %s answered %T", node, list)
				}
				var seen int
				for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
					fields := strings.Fields(line)
					if slices.Contains(fields, "cmd=client|list") {
						continue // this test's own
					}
					seen++
					if !slices.Contains(fields, tc.want) {
						t.Errorf("a connection to %s does not speak %s: %s", node, tc.want, line)
					}
				}
				if seen == 0 {
					t.Errorf("no connection of the program to %s to look at", node)
				}
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

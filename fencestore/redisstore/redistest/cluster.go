package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of masters without replicas.
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts n cluster-enabled servers (cluster-node-timeout 2000,
// each with its own free cluster bus port), joins them with
// `redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes`, which
// spreads the 16384 slots over them, and waits until every node reports
// cluster_state:ok and knows all n nodes. args are passed to every server
// as Start takes them.
func StartCluster(t testing.TB, n int, args ...string) *Cluster {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatal("redis-cli not found: apt-get install -y redis-tools")
	}
	c := &Cluster{}
	for range n {
		s := launch(t, "", func(port int, dir string) []string {
			// The bus port defaults to port+10000, which may be taken or
			// above 65535: give it a free port of its own.
			bus, err := freePort()
			if err != nil {
				t.Fatalf("redistest: free port: %v", err)
			}
			a := append([]string{"--save", "", "--appendonly", "no",
				"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
				"--cluster-node-timeout", "2000", "--cluster-port", strconv.Itoa(bus)}, args...)
			return append(a, FixedArgs(port, dir)...)
		}, nil)
		c.Nodes = append(c.Nodes, s)
	}
	create := append([]string{"--cluster", "create"}, c.Addrs()...)
	create = append(create, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, create...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli %s: %v\n%s", strings.Join(create, " "), err, out)
	}
	for _, s := range c.Nodes {
		Poll(t, 15*time.Second, "cluster node "+s.Addr()+" ok", func() error {
			info, err := clusterInfo(s.Addr())
			if err != nil {
				return err
			}
			if info["cluster_state"] != "ok" || info["cluster_known_nodes"] != strconv.Itoa(n) ||
				info["cluster_slots_ok"] != "16384" {
				return fmt.Errorf("cluster_state %s, known nodes %s, slots ok %s",
					info["cluster_state"], info["cluster_known_nodes"], info["cluster_slots_ok"])
			}
			return nil
		})
	}
	return c
}

func clusterInfo(addr string) (map[string]string, error) {
	r, err := Do(addr, nil, "CLUSTER", "INFO")
	if err != nil {
		return nil, err
	}
	text, ok := r.(string)
	if !ok {
		return nil, fmt.Errorf("CLUSTER INFO: unexpected reply %T", r)
	}
	m := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m, nil
}

// Addrs returns the nodes' host:port addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		out[i] = s.Addr()
	}
	return out
}

// Client returns a cluster client of the nodes with the options fenceproxy
// uses (ContextTimeoutEnabled, no retries), closed when the test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 c.Addrs(),
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
	})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

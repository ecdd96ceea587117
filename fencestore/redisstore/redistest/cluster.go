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

	"github.com/fenceproxy/fenceproxy/internal/freeport"
)

// Cluster is a Redis Cluster: its masters first, then their replicas (if
// any), in the order they were started.
type Cluster struct {
	Nodes []*Server
}

// ClusterNodeArgs are the arguments that make a server a cluster node:
// cluster-enabled, its state in nodes.conf in its directory (so that a
// restart on the same directory rejoins as the same node), the given
// cluster-node-timeout (how long a silent node takes to be judged failed,
// and so how soon a replica takes over) and its own cluster bus port (the
// default, port+10000, may be taken or above 65535).
func ClusterNodeArgs(bus int, nodeTimeout time.Duration) []string {
	return []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10), "--cluster-port", strconv.Itoa(bus)}
}

// CreateCluster joins the nodes at addrs into one cluster with
// `redis-cli --cluster create ... --cluster-replicas <replicas> --cluster-yes`,
// which spreads the 16384 slots over the first len(addrs)/(replicas+1)
// nodes and makes the others their replicas (redis-cli warns that a master
// and its replica share a host, 127.0.0.1, and goes on).
func CreateCluster(ctx context.Context, addrs []string, replicas int) error {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return fmt.Errorf("redis-cli not found: apt-get install -y redis-tools")
	}
	create := append([]string{"--cluster", "create"}, addrs...)
	create = append(create, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, create...).CombinedOutput(); err != nil {
		return fmt.Errorf("redis-cli %s: %w\n%s", strings.Join(create, " "), err, out)
	}
	return nil
}

// ClusterReady returns nil once the node at addr reports cluster_state:ok,
// knows nodes nodes and sees every slot served; a replica must also have
// its link to its master up.
func ClusterReady(addr string, nodes int) error {
	info, err := ClusterInfo(addr)
	if err != nil {
		return err
	}
	if info["cluster_state"] != "ok" || info["cluster_known_nodes"] != strconv.Itoa(nodes) ||
		info["cluster_slots_ok"] != "16384" {
		return fmt.Errorf("cluster_state %s, known nodes %s, slots ok %s",
			info["cluster_state"], info["cluster_known_nodes"], info["cluster_slots_ok"])
	}
	repl, err := Info(addr, nil, "replication")
	if err != nil {
		return err
	}
	if repl["role"] == "slave" && repl["master_link_status"] != "up" {
		return fmt.Errorf("replica's master_link_status %q", repl["master_link_status"])
	}
	return nil
}

// StartCluster starts n cluster-enabled masters without replicas
// (cluster-node-timeout 2000), joins them, which spreads the 16384 slots
// over them, and waits until every node reports cluster_state:ok and knows
// all n nodes. args are passed to every server as Start takes them.
func StartCluster(t testing.TB, n int, args ...string) *Cluster {
	t.Helper()
	return startCluster(t, n, 0, 2*time.Second, args...)
}

// StartClusterWithReplicas starts masters cluster-enabled masters, each
// with replicas replicas, and waits as StartCluster does, and until every
// master counts its replicas' acknowledgements (WAIT). The node timeout is
// 1000 ms, so that a master killed is replaced by its replica within a few
// seconds. args are passed to every server as Start takes them (for
// example "--appendonly", "yes", "--appendfsync", "always").
func StartClusterWithReplicas(t testing.TB, masters, replicas int, args ...string) *Cluster {
	t.Helper()
	c := startCluster(t, masters*(1+replicas), replicas, time.Second, args...)
	for _, s := range c.Nodes[:masters] {
		Poll(t, 15*time.Second, "master "+s.Addr()+" acknowledged by its replicas", func() error { return WaitAcks(s.Addr()) })
	}
	return c
}

func startCluster(t testing.TB, n, replicas int, nodeTimeout time.Duration, args ...string) *Cluster {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatal("redis-cli not found: apt-get install -y redis-tools")
	}
	c := &Cluster{}
	for range n {
		s := launch(t, "", func(port int, dir string) []string {
			bus, err := freeport.Port()
			if err != nil {
				t.Fatalf("redistest: free port: %v", err)
			}
			a := []string{"--save", "", "--appendonly", "no"}
			if replicas > 0 {
				// A replica's first sync starts at once, not after 5 s.
				a = append(a, "--repl-diskless-sync-delay", "0")
			}
			a = append(a, ClusterNodeArgs(bus, nodeTimeout)...)
			a = append(a, args...)
			return append(a, FixedArgs(port, dir)...)
		}, nil)
		c.Nodes = append(c.Nodes, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := CreateCluster(ctx, c.Addrs(), replicas); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	for _, s := range c.Nodes {
		Poll(t, 15*time.Second, "cluster node "+s.Addr()+" ok", func() error { return ClusterReady(s.Addr(), n) })
	}
	return c
}

// ClusterInfo returns the fields of CLUSTER INFO of the node at addr.
func ClusterInfo(addr string) (map[string]string, error) {
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
// uses (RESP2, ContextTimeoutEnabled, no retries), closed when the test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 c.Addrs(),
		Protocol:              Protocol,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
	})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

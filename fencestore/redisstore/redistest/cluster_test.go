package redistest_test

import (
	"testing"

	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// TestClusterWithReplicas: three masters, each with one replica in sync,
// every node sees the whole cluster; StartCluster's masters have none.
func TestClusterWithReplicas(t *testing.T) {
	for _, tc := range []struct {
		name              string
		start             func(t *testing.T) *redistest.Cluster
		nodes, withSlaves int
	}{
		{"replicas", func(t *testing.T) *redistest.Cluster { return redistest.StartClusterWithReplicas(t, 3, 1) }, 6, 3},
		{"masters only", func(t *testing.T) *redistest.Cluster { return redistest.StartCluster(t, 3) }, 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.start(t)
			if len(c.Nodes) != tc.nodes {
				t.Fatalf("%d nodes, want %d", len(c.Nodes), tc.nodes)
			}
			masters, withSlaves := 0, 0
			for _, addr := range c.Addrs() {
				if err := redistest.ClusterReady(addr, tc.nodes); err != nil {
					t.Fatalf("%s: %v", addr, err)
				}
				info, err := redistest.Info(addr, nil, "replication")
				if err != nil {
					t.Fatal(err)
				}
				if info["role"] == "master" {
					masters++
					if info["connected_slaves"] == "1" {
						withSlaves++
					}
				}
			}
			if masters != 3 || withSlaves != tc.withSlaves {
				t.Fatalf("%d masters, %d with one replica; want 3 and %d", masters, withSlaves, tc.withSlaves)
			}
		})
	}
}

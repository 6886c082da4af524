package freeport

import "testing"

// TestPortsDiffer: the ports are all different. Chosen one at a time, each
// listener closed at once, 200 ports held a repeat in 10 runs of 10 (the
// kernel picks a bound port at random), and a repeated route port made
// nats-server refuse a cluster's configuration.
func TestPortsDiffer(t *testing.T) {
	ports := Ports(t, 200)
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d chosen twice in %v", p, ports)
		}
		seen[p] = true
	}
}

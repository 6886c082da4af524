// Package freeport finds loopback ports for the test harnesses' servers.
package freeport

import (
	"net"
	"testing"
)

// Ports returns n different loopback ports nothing listens on right now. It
// holds each one's listener until all are chosen, so the kernel cannot hand
// the same port out twice.
func Ports(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		addr, ok := l.Addr().(*net.TCPAddr)
		if !ok {
			t.Fatalf("freeport: listener address %v is not TCP", l.Addr())
		}
		ports[i] = addr.Port
	}
	return ports
}

// Package freeport finds loopback ports for the test harnesses' servers.
package freeport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
)

// Pick returns n different loopback ports nothing listens on right now. It
// holds each one's listener until all are chosen, so the kernel cannot hand
// the same port out twice.
func Pick(n int) (ports []int, err error) {
	ports = make([]int, n)
	for i := range ports {
		l, lerr := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
		if lerr != nil {
			return nil, fmt.Errorf("freeport: %w", lerr)
		}
		defer func() { err = errors.Join(err, l.Close()) }()
		addr, ok := l.Addr().(*net.TCPAddr)
		if !ok {
			return nil, fmt.Errorf("freeport: listener address %v is not TCP", l.Addr())
		}
		ports[i] = addr.Port
	}
	return ports, nil
}

// Ports is Pick for a test: it fails t when no port can be had.
func Ports(t testing.TB, n int) []int {
	t.Helper()
	ports, err := Pick(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

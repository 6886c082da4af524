package rabbittest

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
)

// Method is an AMQP 0-9-1 method: its class and method IDs.
type Method struct{ Class, ID uint16 }

// Methods a Mute can swallow.
var (
	ConnectionClose = Method{10, 50}
	ChannelOpen     = Method{20, 10}
	ExchangeDeclare = Method{40, 10}
	QueueDeclare    = Method{50, 10}
	BasicQos        = Method{60, 10}
	BasicConsume    = Method{60, 20}
	BasicCancel     = Method{60, 30}
	ConfirmSelect   = Method{85, 10}
)

// Mute is a TCP proxy in front of a broker that can swallow chosen
// methods a client sends. The broker never sees them, so it never answers,
// while everything else flows both ways, heartbeats included: a broker
// that is up but leaves a request unanswered, as RabbitMQ 3.10.8 left a
// basic.consume on a quorum queue without a leader.
type Mute struct {
	// URL is the broker's URL with the proxy's address.
	URL      string
	mu       sync.Mutex
	muted    map[Method]bool
	swallows atomic.Int64
}

// StartMute starts a Mute in front of the broker at upstream, stopped when
// t ends.
func StartMute(t testing.TB, upstream string) *Mute {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatalf("rabbittest: mute: %v", err)
	}
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("rabbittest: mute: %v", err)
	}
	target := u.Host
	u.Host = l.Addr().String()
	m := &Mute{URL: u.String(), muted: map[Method]bool{}}
	var (
		wg    sync.WaitGroup
		cmu   sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		_ = l.Close()
		cmu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		cmu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			client, err := l.Accept()
			if err != nil {
				return
			}
			var d net.Dialer
			server, err := d.DialContext(context.Background(), "tcp", target)
			if err != nil {
				_ = client.Close()
				continue
			}
			cmu.Lock()
			conns = append(conns, client, server)
			cmu.Unlock()
			wg.Go(func() {
				_, _ = io.Copy(client, server)
				_ = client.Close()
			})
			wg.Go(func() {
				_ = m.forward(server, client)
				_ = server.Close()
			})
		}
	})
	return m
}

// Swallow makes the proxy drop every later frame of these methods.
func (m *Mute) Swallow(ms ...Method) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, x := range ms {
		m.muted[x] = true
	}
}

// Pass lets every method through again.
func (m *Mute) Pass() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.muted)
}

// Swallowed is how many frames the proxy dropped.
func (m *Mute) Swallowed() int64 { return m.swallows.Load() }

func (m *Mute) muting(x Method) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.muted[x]
}

// forward copies the client's protocol header, then its frames, dropping
// the method frames muted at the moment they pass.
func (m *Mute) forward(dst io.Writer, src io.Reader) error {
	r := bufio.NewReader(src)
	header := make([]byte, 8) // "AMQP" 0 0 9 1
	if _, err := io.ReadFull(r, header); err != nil {
		return err
	}
	if _, err := dst.Write(header); err != nil {
		return err
	}
	for {
		// type (1), channel (2), size (4), payload, frame end (1)
		head := make([]byte, 7)
		if _, err := io.ReadFull(r, head); err != nil {
			return err
		}
		size := binary.BigEndian.Uint32(head[3:])
		if size > 1<<27 {
			return errors.New("rabbittest: mute: frame too large")
		}
		frame := make([]byte, 7+int(size)+1)
		copy(frame, head)
		if _, err := io.ReadFull(r, frame[7:]); err != nil {
			return err
		}
		if frame[0] == 1 && size >= 4 {
			x := Method{binary.BigEndian.Uint16(frame[7:]), binary.BigEndian.Uint16(frame[9:])}
			if m.muting(x) {
				m.swallows.Add(1)
				continue
			}
		}
		if _, err := dst.Write(frame); err != nil {
			return err
		}
	}
}

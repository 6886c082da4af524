package httpapi_test

import (
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pgProxy forwards TCP to Postgres, so a test can cut it (every connection
// closed, new ones refused) or slow it (a delay on each chunk sent to
// Postgres), as a network partition or an overloaded server would.
type pgProxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // nanoseconds
	cut    atomic.Bool

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func startPGProxy(t *testing.T, dbURL string) (*pgProxy, string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pgProxy{ln: ln, target: u.Host, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() { _ = ln.Close(); p.closeAll() })
	u.Host = ln.Addr().String()
	return p, u.String()
}

func (p *pgProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.cut.Load() {
			_ = c.Close()
			continue
		}
		go p.handle(c)
	}
}

func (p *pgProxy) handle(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	p.mu.Lock()
	p.conns[client], p.conns[server] = struct{}{}, struct{}{}
	p.mu.Unlock()
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				if d := time.Duration(p.delay.Load()); d > 0 {
					time.Sleep(d)
				}
				if _, werr := server.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		_ = server.Close()
		_ = client.Close()
	}()
	_, _ = io.Copy(client, server)
	_ = client.Close()
	_ = server.Close()
}

// Cut closes every connection and refuses new ones until Restore.
func (p *pgProxy) Cut() { p.cut.Store(true); p.closeAll() }

// Restore accepts connections again.
func (p *pgProxy) Restore() { p.cut.Store(false) }

// Slow delays every chunk sent to Postgres by d (0: none).
func (p *pgProxy) Slow(d time.Duration) { p.delay.Store(int64(d)) }

func (p *pgProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

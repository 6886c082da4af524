package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// pgProxy is a TCP proxy in front of Postgres that counts the transactions
// its clients end, as they end. pg_stat_database.xact_commit counts the
// same thing, but a backend publishes its counts at most once a second, and
// on the Postgres 15 here a backend that goes idle keeps its last counts
// unpublished until its next transaction, so a reading taken after a phase
// misses an unknown part of it. The proxy reads the server's side of the
// protocol: every ReadyForQuery with status idle ends a transaction (an
// implicit one after a Sync or a simple query, an explicit one after its
// COMMIT or ROLLBACK, and the session's start), which rolled back when an
// ErrorResponse or a ROLLBACK tag came since the previous ReadyForQuery.
// The run's end compares the total with xact_commit once every connection
// is closed (crossCheck).
type pgProxy struct {
	ln     net.Listener
	target string

	commits, rollbacks atomic.Int64
	// blind counts connections whose stream could not be read (TLS).
	blind atomic.Int64

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	// shapes counts the committed transactions by their statements'
	// command tags (shape).
	shapes map[string]int64
	wg     sync.WaitGroup
}

// startPGProxy listens on a free loopback port and forwards to target
// (host:port).
func startPGProxy(target string) (*pgProxy, error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("postgres proxy: %w", err)
	}
	p := &pgProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, shapes: map[string]int64{}}
	p.wg.Go(p.serve)
	return p, nil
}

// url is dbURL with its host and port replaced by the proxy's.
func (p *pgProxy) url(dbURL string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", errors.New("postgres proxy: malformed database URL")
	}
	u.Host = p.ln.Addr().String()
	return u.String(), nil
}

// shapeCounts copies the counts of committed transactions by shape.
func (p *pgProxy) shapeCounts() map[string]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.shapes)
}

// shape names a transaction by its statements' labels (see label):
// "UPDATE inbox" for an implicit one, "tx(INSERT payments; SELECT
// payments)" for an explicit one (BEGIN … COMMIT), "prepare" for a
// statement's preparation (no statement ran), "connect" for a session's
// start. A statement repeated back to back counts once, marked "×n" (the
// inbox's group commit sends one insert per message in a pipeline), so
// that groups of every size share a shape.
func shape(stmts []string, start bool) string {
	switch {
	case start:
		return "connect"
	case len(stmts) == 0:
		return "prepare"
	case stmts[0] == "BEGIN":
		inner := stmts[1:]
		if n := len(inner); n > 0 && inner[n-1] == "COMMIT" {
			inner = inner[:n-1]
		}
		return "tx(" + strings.Join(collapseRepeats(inner), "; ") + ")"
	}
	return strings.Join(collapseRepeats(stmts), "; ")
}

// collapseRepeats replaces a run of two or more equal labels by one
// marked " ×n".
func collapseRepeats(stmts []string) []string {
	out := make([]string, 0, len(stmts))
	for i := 0; i < len(stmts); {
		j := i + 1
		for j < len(stmts) && stmts[j] == stmts[i] {
			j++
		}
		if j-i > 1 {
			out = append(out, stmts[i]+" ×n")
		} else {
			out = append(out, stmts[i])
		}
		i = j
	}
	return out
}

var (
	dmlRE  = regexp.MustCompile(`(?is)(\w+\s+)?\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+([\w."]+)`)
	fromRE = regexp.MustCompile(`(?is)\bFROM\s+([\w."]+)`)
	// commentRE matches SQL comments, which may come before the verb.
	commentRE = regexp.MustCompile(`(?s)--[^\n]*|/\*.*?\*/`)
)

// label names a statement by what it changes: the verbs and tables of its
// INSERT, UPDATE and DELETE (a CTE can hold several), else "SELECT" and
// its first table, else its first word (BEGIN, COMMIT, SET…).
func label(sql string) string {
	var parts []string
	for _, m := range dmlRE.FindAllStringSubmatch(sql, -1) {
		prev := strings.ToUpper(strings.TrimSpace(m[1]))
		table := strings.Trim(m[3], `"`)
		if prev == "FOR" || prev == "DO" || strings.EqualFold(table, "SET") {
			continue // FOR UPDATE, ON CONFLICT DO UPDATE SET
		}
		verb, _, _ := strings.Cut(strings.ToUpper(m[2]), " ")
		if l := verb + " " + table; !slices.Contains(parts, l) {
			parts = append(parts, l)
		}
	}
	if len(parts) > 0 {
		return strings.Join(parts, "+")
	}
	first := strings.ToUpper(strings.TrimSpace(commentRE.ReplaceAllString(sql, " ")))
	if i := strings.IndexAny(first, " \t\n(;"); i >= 0 {
		first = first[:i]
	}
	switch first {
	case "":
		return "ping" // pgx's "-- ping" of a connection idle over a second
	case "SELECT", "WITH":
		if m := fromRE.FindStringSubmatch(sql); m != nil {
			return "SELECT " + strings.Trim(m[1], `"`)
		}
		return "SELECT"
	case "START":
		return "BEGIN"
	case "END":
		return "COMMIT"
	}
	return first
}

// syncQueue carries, from the client's side of a connection to the
// server's, the statements each Sync (or simple query) ran: the client's
// messages are read as they are sent, ahead of the answers.
type syncQueue struct {
	mu     sync.Mutex
	groups [][]string
	cur    []string
	named  map[string]string // prepared statement name → label
}

func (q *syncQueue) push(g []string) {
	q.mu.Lock()
	q.groups = append(q.groups, g)
	q.mu.Unlock()
}

// pop returns the oldest group, or nil when none is known.
func (q *syncQueue) pop() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.groups) == 0 {
		return nil
	}
	g := q.groups[0]
	q.groups = q.groups[1:]
	return g
}

// watch forwards the client's messages to the server, noting the
// statements each Sync or simple query runs: Parse names a statement,
// Bind runs one, Query runs its text.
func (q *syncQueue) watch(r *bufio.Reader, server net.Conn) {
	w := bufio.NewWriterSize(server, 64<<10)
	q.named = map[string]string{}
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			_ = w.Flush()
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[1:])) - 4
		if n < 0 {
			return
		}
		if _, err := w.Write(hdr[:]); err != nil {
			return
		}
		switch hdr[0] {
		case 'P', 'B', 'Q':
			body := make([]byte, n)
			if _, err := io.ReadFull(r, body); err != nil {
				return
			}
			if _, err := w.Write(body); err != nil {
				return
			}
			fields := strings.SplitN(string(body), "\x00", 3)
			switch {
			case hdr[0] == 'P' && len(fields) >= 2: // name, query, …
				q.named[fields[0]] = label(fields[1])
			case hdr[0] == 'B' && len(fields) >= 2: // portal, statement, …
				q.cur = append(q.cur, q.named[fields[1]])
			case hdr[0] == 'Q':
				q.push([]string{label(fields[0])})
			}
		case 'S':
			q.push(q.cur)
			q.cur = nil
		default:
			if _, err := io.CopyN(w, r, int64(n)); err != nil {
				return
			}
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

func (p *pgProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *pgProxy) track(c net.Conn, on bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		if p.conns == nil {
			return false
		}
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *pgProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.handle(c) })
	}
}

func (p *pgProxy) handle(client net.Conn) {
	server, err := (&net.Dialer{}).Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(client, true) || !p.track(server, true) {
		_ = client.Close()
		_ = server.Close()
		return
	}
	defer func() {
		_ = client.Close()
		_ = server.Close()
		p.track(client, false)
		p.track(server, false)
	}()
	if !p.startup(client, server) {
		return
	}
	done := make(chan struct{})
	q := &syncQueue{}
	go func() {
		q.watch(bufio.NewReaderSize(client, 64<<10), server)
		_ = server.Close()
		close(done)
	}()
	p.count(bufio.NewReaderSize(server, 64<<10), client, q)
	_ = client.Close()
	<-done
}

// Codes of the startup packets that a server answers with one unframed byte.
const (
	sslRequestCode    = 80877103
	gssencRequestCode = 80877104
)

// startup forwards the client's startup packets. An SSL or GSS encryption
// request the server accepts makes the stream unreadable: it is then
// copied blind, and handle returns false once it ends.
func (p *pgProxy) startup(client, server net.Conn) bool {
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(client, hdr[:]); err != nil {
			return false
		}
		n := int(binary.BigEndian.Uint32(hdr[:4]))
		if n < 8 || n > 1<<16 {
			return false
		}
		rest := make([]byte, n-8)
		if _, err := io.ReadFull(client, rest); err != nil {
			return false
		}
		if _, err := server.Write(append(hdr[:], rest...)); err != nil {
			return false
		}
		code := binary.BigEndian.Uint32(hdr[4:])
		if code != sslRequestCode && code != gssencRequestCode {
			return true
		}
		var answer [1]byte
		if _, err := io.ReadFull(server, answer[:]); err != nil {
			return false
		}
		if _, err := client.Write(answer[:]); err != nil {
			return false
		}
		if answer[0] == 'S' || answer[0] == 'G' {
			p.blind.Add(1)
			go func() { _, _ = io.Copy(server, client); _ = server.Close() }()
			_, _ = io.Copy(client, server)
			return false
		}
	}
}

// count forwards the server's messages to the client, counting the
// transactions they end. It flushes whenever no more input is buffered, so
// it adds no wait of its own.
func (p *pgProxy) count(r *bufio.Reader, client net.Conn, q *syncQueue) {
	w := bufio.NewWriterSize(client, 64<<10)
	failed, start := false, true
	var stmts []string
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			_ = w.Flush()
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[1:])) - 4
		if n < 0 {
			return
		}
		if _, err := w.Write(hdr[:]); err != nil {
			return
		}
		switch hdr[0] {
		case 'Z', 'C': // ReadyForQuery, CommandComplete: read the body
			body := make([]byte, n)
			if _, err := io.ReadFull(r, body); err != nil {
				return
			}
			if _, err := w.Write(body); err != nil {
				return
			}
			if hdr[0] == 'C' {
				tag, _, _ := strings.Cut(strings.TrimRight(string(body), "\x00"), " ")
				failed = failed || tag == "ROLLBACK"
				break
			}
			// Each ReadyForQuery but the session's first answers one Sync
			// or one simple query, in order.
			if !start {
				stmts = append(stmts, q.pop()...)
			}
			if len(body) == 1 && body[0] == 'I' {
				if failed {
					p.rollbacks.Add(1)
				} else {
					p.commits.Add(1)
					k := shape(stmts, start)
					p.mu.Lock()
					p.shapes[k]++
					p.mu.Unlock()
				}
				stmts, start = stmts[:0], false
			}
			failed = false
		case 'E': // ErrorResponse
			failed = true
			fallthrough
		default:
			if _, err := io.CopyN(w, r, int64(n)); err != nil {
				return
			}
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

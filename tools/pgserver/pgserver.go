// Package pgserver runs a private PostgreSQL server from the machine's own
// binaries (initdb, pg_ctl), for the local stack and for tests that must
// restart Postgres without disturbing the shared one. As root it runs the
// binaries as the "postgres" user: they refuse to run as root.
package pgserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"time"
)

// Server is a running private PostgreSQL server with trust authentication
// for the user postgres, listening on 127.0.0.1 only.
type Server struct {
	dir    string
	port   int
	pgCtl  string
	prefix []string
}

// ErrNoBinaries reports a machine without PostgreSQL's server binaries.
var ErrNoBinaries = errors.New("no PostgreSQL server binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql/*/bin")

// Start initialises dir when it holds no cluster yet and starts the server
// on port (0: a free port).
func Start(ctx context.Context, dir string, port int) (*Server, error) {
	initdb, err := findBinary("initdb")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, port: port, pgCtl: filepath.Join(filepath.Dir(initdb), "pg_ctl")}
	if s.port == 0 {
		if s.port, err = freePort(); err != nil {
			return nil, err
		}
	}
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			return nil, errors.New("running as root, and there is no 'postgres' user to run a private PostgreSQL server as")
		}
		s.prefix = []string{"runuser", "-u", "postgres", "--"}
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err != nil {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		if len(s.prefix) > 0 {
			if out, err := exec.CommandContext(ctx, "chown", "-R", "postgres", dir).CombinedOutput(); err != nil {
				return nil, fmt.Errorf("chown %s: %w\n%s", dir, err, out)
			}
		}
		if out, err := s.run(ctx, initdb, "-D", dir, "-U", "postgres", "--auth=trust").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("initdb: %w\n%s", err, out)
		}
	}
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// URL returns the connection string of database on the server.
func (s *Server) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, database)
}

// Port returns the port the server listens on.
func (s *Server) Port() int { return s.port }

// Restart stops the server as a restart does (every connection is closed;
// fast mode: open transactions roll back) and starts it again on the same
// port and data.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.Stop(ctx); err != nil {
		return err
	}
	return s.start(ctx)
}

// Stop stops the server (fast mode) and waits for it to exit.
func (s *Server) Stop(ctx context.Context) error {
	if out, err := s.run(ctx, s.pgCtl, "-D", s.dir, "-m", "fast", "-w", "stop").CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl stop: %w\n%s", err, out)
	}
	return nil
}

func (s *Server) start(ctx context.Context) error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=300", s.port, s.dir)
	logFile := filepath.Join(s.dir, "server.log")
	if out, err := s.run(ctx, s.pgCtl, "-D", s.dir, "-o", opts, "-l", logFile, "-w", "-t", "60", "start").CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl start (log %s): %w\n%s", logFile, err, out)
	}
	return nil
}

func (s *Server) run(ctx context.Context, bin string, args ...string) *exec.Cmd {
	all := append(append(append([]string{}, s.prefix...), bin), args...)
	return exec.CommandContext(ctx, all[0], all[1:]...) //nolint:gosec // PostgreSQL's own binaries, found by findBinary
}

func findBinary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	if matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name); len(matches) > 0 {
		return matches[len(matches)-1], nil
	}
	return "", ErrNoBinaries
}

// freePort returns a TCP port free on 127.0.0.1 right now.
func freePort() (int, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return strconv.Atoi(p)
}

// WaitReady waits until a TCP connection to the server succeeds.
func (s *Server) WaitReady(ctx context.Context) error {
	for {
		d := net.Dialer{Timeout: time.Second}
		c, err := d.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", s.port))
		if err == nil {
			return c.Close()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/effectively/effectively/internal/leaf/tracing"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Errors callers test with errors.Is. Driver errors are translated into these
// once, here, so no caller inspects a SQLSTATE.
var (
	// ErrDuplicate reports a unique-constraint violation (SQLSTATE 23505).
	ErrDuplicate = errors.New("duplicate")
	// ErrNotFound reports that no row matched.
	ErrNotFound = errors.New("not found")
	// ErrFenced reports a ledger transition refused because the row's claim
	// or state is no longer the one the caller holds: a later claim owns it.
	ErrFenced = errors.New("ledger row is owned by a later claim")
	// ErrMismatch reports an idempotency key reused for a different request.
	ErrMismatch = errors.New("idempotency key reused with a different request")
	// ErrRefundNotSucceeded reports a refund receipt's claim refused because
	// its refund is pending or failed at Stripe (SQLSTATE EF001, raised by
	// migration 00023's trigger for any release's claim).
	ErrRefundNotSucceeded = errors.New("refund not succeeded: no receipt")
)

// DefaultURL is the database used when DATABASE_URL is not set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/effectively?sslmode=disable"

// PoolConfig tunes the pool. Zero values take the defaults noted per field.
type PoolConfig struct {
	// MaxConns bounds open connections. Default 16.
	MaxConns int32
	// ConnectTimeout bounds each connection attempt. Default 5s.
	ConnectTimeout time.Duration
	// PingAfterIdle is how long a connection must have sat idle before it
	// is pinged when acquired. Default 1m, not pgx's 1s, which costs a round
	// trip for a third to half of the messages (docs/performance.md, "Pings").
	PingAfterIdle time.Duration
}

// Open creates the pool for url and checks that the server answers. It is
// called once per process.
func Open(ctx context.Context, url string, cfg PoolConfig) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", redact(err))
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = 16
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 5 * time.Second
	}
	if cfg.PingAfterIdle == 0 {
		cfg.PingAfterIdle = time.Minute
	}
	pc.MaxConns = cfg.MaxConns
	pc.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	pc.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool {
		return p.IdleDuration >= cfg.PingAfterIdle
	}
	// Queries made on behalf of a traced message become spans of its trace
	// (SQL text only, never the arguments); others cost a context lookup.
	pc.ConnConfig.Tracer = tracing.PgxTracer{}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("create pool: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to postgres at %s: %w", pc.ConnConfig.Host, err)
	}
	return pool, nil
}

// Warm holds n of pool's connections at once (at most its MaxConns), then
// gives them back: each is opened now, not by a message, and stays idle in
// the pool. A worker warms its pool before it answers /readyz, so that a
// start's first messages (after an outage, a backlog's and every other
// route's at once) do not each open one. On each it also runs the rate
// limiter's reservation (warmReserve), which a new backend otherwise
// compiles on the first provider call it paces. The schema must be
// migrated first.
func Warm(ctx context.Context, pool *pgxpool.Pool, n int32) error {
	n = min(n, pool.Config().MaxConns)
	conns := make([]*pgxpool.Conn, 0, max(n, 0))
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("open %d connections to postgres: %w", n, translate(err))
		}
		conns = append(conns, c)
	}
	// Each on its own backend: they compile at once.
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() { errs[i] = warmReserve(ctx, c.Conn()) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("warm the rate limiter's statements: %w", translate(err))
	}
	return nil
}

// warmReserve runs ReserveRate's statement three times on conn, in a
// transaction it rolls back, so that no row stays: its backend compiles
// rate_reserve_flow and plans the statements of both its paths (the line's,
// twice, then the express lane's for another flow), and conn prepares the
// statement. A new backend's first reservation took 19–23 ms here, one after
// this warm-up 1.2–1.5 ms; at a restart after an outage that first one comes on
// every connection at once, while the machine is busiest. The bucket is
// named after the backend's PID: warming workers lock no live bucket, nor
// each other's.
func warmReserve(ctx context.Context, conn *pgx.Conn) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	bucket := fmt.Sprintf("warm:%d", conn.PgConn().PID())
	for _, flow := range []string{bucket, bucket, bucket + ":other"} {
		var wait float64
		var ok, express bool
		if err := tx.QueryRow(ctx, reserveSQL, []string{bucket}, []float64{1}, []float64{1}, 10.0, flow, 0.25, 10.0).Scan(&wait, &ok, &express); err != nil {
			return err
		}
	}
	return tx.Rollback(ctx)
}

// redact drops the parse error's text, which can echo the URL with its password.
func redact(err error) error {
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		return errors.New("malformed connection string")
	}
	return err
}

// Migrate applies the embedded migrations that are not applied yet. It is
// idempotent and safe to run from several processes at once: goose holds a
// Postgres advisory lock while it works.
func Migrate(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return fmt.Errorf("migration lock: %w", err)
	}
	opts := []goose.ProviderOption{goose.WithSessionLocker(locker), goose.WithDisableGlobalRegistry(true)}
	if logger != nil {
		opts = append(opts, goose.WithSlog(logger))
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, mustSub(migrations, "migrations"), opts...)
	if err != nil {
		return fmt.Errorf("load migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	return nil
}

// DBTX is what queries need: a pool, a connection or a transaction.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// WithTx runs fn in a transaction, commits when fn returns nil and rolls back
// otherwise. A failed rollback is joined to fn's error.
func WithTx(ctx context.Context, pool *pgxpool.Pool, fn func(tx pgx.Tx) error) (err error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", translate(err))
	}
	defer func() {
		if err != nil {
			if rbErr := tx.Rollback(context.WithoutCancel(ctx)); rbErr != nil && !errors.Is(rbErr, pgx.ErrTxClosed) {
				err = errors.Join(err, fmt.Errorf("rollback: %w", rbErr))
			}
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", translate(err))
	}
	return nil
}

// translate maps driver errors onto this package's sentinel errors, keeping
// the original in the chain.
func translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return fmt.Errorf("%w: %s: %w", ErrDuplicate, pgErr.ConstraintName, err)
	}
	if errors.As(err, &pgErr) && pgErr.Code == "EF001" {
		return fmt.Errorf("%w: %w", ErrRefundNotSucceeded, err)
	}
	return err
}

// Store runs effectively's queries against one pool.
type Store struct {
	pool  *pgxpool.Pool
	inbox inboxGroup // InsertInbox calls waiting to share a transaction
}

// New returns a Store over pool. The pool is owned by the caller.
func New(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool}
}

// Pool returns the pool the Store uses.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// WithDatabase returns the postgres connection URL raw with its database set
// to name, everything else (host, user, options) kept.
func WithDatabase(raw, name string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("parse the postgres URL: %w", redact(err))
	}
	u.Path = "/" + name
	return u.String(), nil
}

package store

import (
	"context"
	"fmt"
	"time"
)

// RateBucket is one bucket of a request's rate limits: Name shared by
// every worker, Rate requests a second on average, Burst at once.
type RateBucket struct {
	Name  string
	Rate  float64
	Burst float64
}

// Reservation is one request's claim on its rate buckets.
type Reservation struct {
	// Buckets are the request's buckets, in name order.
	Buckets []RateBucket
	// MaxWait is the longest the request may wait in the buckets' line.
	MaxWait time.Duration
	// Flow is who asks (a route's consumer). When the line's wait is longer
	// than one interval of the slowest bucket, a flow with no slot to come
	// in these buckets takes an express slot, from a Share of each bucket's
	// rate, when one comes sooner and at most ExpressWait away. Share 0: no
	// express lane.
	Flow        string
	Share       float64
	ExpressWait time.Duration
}

// Reserved is what ReserveRate did.
type Reserved struct {
	// OK: the slots are taken; the request goes after Wait. Not OK, Wait
	// is what it would have waited in the line.
	OK   bool
	Wait time.Duration
	// Express: the slots are the express lane's.
	Express bool
}

// reserveSQL is ReserveRate's statement; Warm runs it on each connection.
const reserveSQL = `SELECT wait, reserved, express FROM rate_reserve_async($1, $2, $3, $4, $5, $6, $7)`

// ReserveRate takes one request's slot in every bucket (row rate_limits,
// created at its first use), all or none, in one statement
// (rate_reserve_flow, migrations 00014 and 00018): past a line, an express
// slot for a flow without a backlog there when it comes sooner than the
// line's, else the line's slots when the request would wait at most
// r.MaxWait. Times are the database's, so the workers' clocks do not
// matter. The statement commits asynchronously (rate_reserve_async,
// migration 00019): the rows it locks are not held through a WAL flush.
func (s *Store) ReserveRate(ctx context.Context, r Reservation) (Reserved, error) {
	names := make([]string, len(r.Buckets))
	emission := make([]float64, len(r.Buckets))
	burst := make([]float64, len(r.Buckets))
	for i, b := range r.Buckets {
		if b.Rate <= 0 {
			return Reserved{}, fmt.Errorf("rate bucket %q: rate %v is not positive", b.Name, b.Rate)
		}
		names[i], emission[i], burst[i] = b.Name, 1/b.Rate, max(b.Burst, 1)
	}
	var wait float64
	var res Reserved
	err := s.pool.QueryRow(ctx, reserveSQL,
		names, emission, burst, max(r.MaxWait, 0).Seconds(), r.Flow, max(r.Share, 0), max(r.ExpressWait, 0).Seconds()).
		Scan(&wait, &res.OK, &res.Express)
	if err != nil {
		return Reserved{}, fmt.Errorf("reserve rate %v: %w", names, translate(err))
	}
	res.Wait = time.Duration(wait * float64(time.Second))
	return res, nil
}

// PauseRate holds every named bucket for d from now: no request reserved
// afterwards goes before then, and the burst refills only from then on. A
// bucket never used before is left alone.
func (s *Store) PauseRate(ctx context.Context, names []string, d time.Duration) error {
	_, err := s.pool.Exec(ctx, `
		UPDATE rate_limits
		   SET tat = greatest(tat, clock_timestamp() + make_interval(secs => $2) + make_interval(secs => (burst - 1) * emission)),
		       express_tat = greatest(express_tat, clock_timestamp() + make_interval(secs => $2)),
		       updated_at = clock_timestamp()
		 WHERE bucket = ANY($1)`, names, d.Seconds())
	if err != nil {
		return fmt.Errorf("pause rate %v: %w", names, translate(err))
	}
	return nil
}

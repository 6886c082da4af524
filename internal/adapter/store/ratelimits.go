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

// ReserveRate takes one request's slot in every bucket (row rate_limits,
// created at its first use), all or none, in one statement (rate_reserve):
// only when the request would wait at most maxWait. It returns the wait
// and whether the slots were taken; when not, the wait is what the request
// would have waited (a retry-after). Times are the database's, so the
// workers' clocks do not matter.
func (s *Store) ReserveRate(ctx context.Context, buckets []RateBucket, maxWait time.Duration) (wait time.Duration, reserved bool, err error) {
	names := make([]string, len(buckets))
	emission := make([]float64, len(buckets))
	burst := make([]float64, len(buckets))
	for i, b := range buckets {
		if b.Rate <= 0 {
			return 0, false, fmt.Errorf("rate bucket %q: rate %v is not positive", b.Name, b.Rate)
		}
		names[i], emission[i], burst[i] = b.Name, 1/b.Rate, max(b.Burst, 1)
	}
	var secs float64
	err = s.pool.QueryRow(ctx, `SELECT wait, reserved FROM rate_reserve($1, $2, $3, $4)`,
		names, emission, burst, max(maxWait, 0).Seconds()).Scan(&secs, &reserved)
	if err != nil {
		return 0, false, fmt.Errorf("reserve rate %v: %w", names, translate(err))
	}
	return time.Duration(secs * float64(time.Second)), reserved, nil
}

// PauseRate holds every named bucket for d from now: no request reserved
// afterwards goes before then, and the burst refills only from then on. A
// bucket never used before is left alone.
func (s *Store) PauseRate(ctx context.Context, names []string, d time.Duration) error {
	_, err := s.pool.Exec(ctx, `
		UPDATE rate_limits
		   SET tat = greatest(tat, clock_timestamp() + make_interval(secs => $2) + make_interval(secs => (burst - 1) * emission)),
		       updated_at = clock_timestamp()
		 WHERE bucket = ANY($1)`, names, d.Seconds())
	if err != nil {
		return fmt.Errorf("pause rate %v: %w", names, translate(err))
	}
	return nil
}

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

// ReserveRate reserves one request's slot in every bucket (row rate_limits,
// created at its first use) in one statement, and returns how long the
// request must wait for the latest of them: zero when it may go now. The
// slot is taken whether or not the caller waits for it. Times are the
// database's, so the workers' clocks do not matter.
func (s *Store) ReserveRate(ctx context.Context, buckets []RateBucket) (time.Duration, error) {
	names := make([]string, len(buckets))
	emission := make([]float64, len(buckets))
	burst := make([]float64, len(buckets))
	for i, b := range buckets {
		if b.Rate <= 0 {
			return 0, fmt.Errorf("rate bucket %q: rate %v is not positive", b.Name, b.Rate)
		}
		names[i], emission[i], burst[i] = b.Name, 1/b.Rate, max(b.Burst, 1)
	}
	var wait float64
	err := s.pool.QueryRow(ctx, `
		WITH now AS (SELECT clock_timestamp() AS t),
		upd AS (
			INSERT INTO rate_limits AS r (bucket, tat, emission, burst)
			SELECT q.bucket, now.t + make_interval(secs => q.emission), q.emission, q.burst
			  FROM unnest($1::text[], $2::float8[], $3::float8[]) AS q(bucket, emission, burst), now
			ON CONFLICT (bucket) DO UPDATE
			   SET tat = greatest(r.tat, (SELECT t FROM now)) + make_interval(secs => excluded.emission),
			       emission = excluded.emission, burst = excluded.burst, updated_at = (SELECT t FROM now)
			RETURNING extract(epoch FROM r.tat - (SELECT t FROM now)) - r.burst * r.emission AS wait)
		SELECT coalesce(greatest(max(wait), 0), 0) FROM upd`, names, emission, burst).Scan(&wait)
	if err != nil {
		return 0, fmt.Errorf("reserve rate %v: %w", names, translate(err))
	}
	return time.Duration(wait * float64(time.Second)), nil
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

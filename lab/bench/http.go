package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/effectively/effectively/internal/intake/httpapi"
)

// HTTPPhase is the HTTP intake measured through the worker process
// (POST /v1/messages and GET /v1/messages/{consumer}/{id} with Prefer: wait).
type HTTPPhase struct {
	// MaxRate is submit + wait (until the workflow closes) per second, in a
	// closed loop of InFlight clients.
	MaxRate float64 `json:"max_rate"`
	// PacedRate is 80% of MaxRate; Paced the submit + wait latency there.
	PacedRate float64 `json:"paced_rate"`
	Paced     Latency `json:"paced"`
	// DuplicateRate is POSTs of one recorded message answered 202 per
	// second (32 clients), against the JetStream burst's Rate.
	DuplicatePOSTs     int     `json:"duplicate_posts"`
	DuplicateConflicts int     `json:"duplicate_conflicts"`
	DuplicateRate      float64 `json:"duplicate_rate"`
	// Waiters GET with Prefer: wait on a workflow held open; the worker's
	// RSS, goroutines and the database's connections before and while they
	// wait.
	Waiters          int     `json:"waiters"`
	WaitersAnswered  int     `json:"waiters_answered"`
	RSSMBBefore      float64 `json:"rss_mb_before"`
	RSSMBDuring      float64 `json:"rss_mb_during"`
	GoroutinesBefore float64 `json:"goroutines_before"`
	GoroutinesDuring float64 `json:"goroutines_during"`
	PGConnsBefore    int     `json:"pg_conns_before"`
	PGConnsDuring    int     `json:"pg_conns_during"`
	// PGBusyDuring is how many of them were not idle (running a query or
	// in a transaction) while the waiters waited.
	PGBusyDuring int `json:"pg_busy_during"`
}

// apiEnv writes a tokens file with a fresh token for the worker's HTTP
// intake and returns the worker's variables for it.
func (s *stack) apiEnv(dir string) ([]string, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	s.apiToken, s.apiURL = "bench_"+hex.EncodeToString(b[:]), "http://"+addr
	path := filepath.Join(dir, "api-tokens")
	if err := os.WriteFile(path, []byte("bench "+httpapi.HashToken(s.apiToken)+" order.placed\n"), 0o600); err != nil {
		return nil, err
	}
	return []string{"EFFECTIVELY_API_ADDR=" + addr, "EFFECTIVELY_API_TOKENS_FILE=" + path, "EFFECTIVELY_API_TOKEN_RATE=100000"}, nil
}

// apiPost submits order orderID as message id; wait adds Prefer: wait=30.
func (s *stack) apiPost(ctx context.Context, c *http.Client, id string, orderID int64, wait bool) (int, error) {
	body := fmt.Appendf(nil, `{"type":"order.placed","data":{"order_id":%d,"amount":1999,"currency":"usd","customer_email":"http%d@example.com","payment_method":"pm_card_visa"}}`, orderID, orderID)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.apiURL+"/v1/messages", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+s.apiToken)
	req.Header.Set("Idempotency-Key", id)
	if wait {
		req.Header.Set("Prefer", "wait=30")
	}
	return s.apiDo(c, req)
}

func (s *stack) apiDo(c *http.Client, req *http.Request) (int, error) {
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// httpOrderBase keeps the phase's orders apart from the planner's.
const httpOrderBase = 900_000_000

// runHTTP measures the HTTP phase: a closed loop of submit + wait, the same
// paced at 80% of its rate, duplicate POSTs, and cfg.HTTPWaiters waiters.
func (s *stack) runHTTP(ctx context.Context, cfg Config) (HTTPPhase, error) {
	var ph HTTPPhase
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.HTTPWaiters + 64}, Timeout: 60 * time.Second}
	var seq atomic.Int64
	next := func() (string, int64) {
		n := seq.Add(1)
		return fmt.Sprintf("bench_http_%s_%06d", s.taskQueue, n), httpOrderBase + n
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	type sent struct {
		id    string
		order int64
	}
	var recorded []sent
	submit := func() time.Duration {
		id, o := next()
		mu.Lock()
		recorded = append(recorded, sent{id, o})
		mu.Unlock()
		start := time.Now()
		code, err := s.apiPost(ctx, c, id, o, true)
		if err == nil && code != http.StatusAccepted {
			err = fmt.Errorf("POST %s: status %d", id, code)
		}
		if err != nil {
			fail(err)
		}
		return time.Since(start)
	}

	work := make(chan struct{}, cfg.HTTPMessages)
	for range cfg.HTTPMessages {
		work <- struct{}{}
	}
	close(work)
	start := time.Now()
	for range cfg.InFlight {
		wg.Go(func() {
			for range work {
				submit()
			}
		})
	}
	wg.Wait()
	ph.MaxRate = float64(cfg.HTTPMessages) / time.Since(start).Seconds()

	ph.PacedRate = pacedShare * ph.MaxRate
	lat := make([]time.Duration, cfg.HTTPMessages)
	tick := time.NewTicker(time.Duration(float64(time.Second) / ph.PacedRate))
	for i := range cfg.HTTPMessages {
		<-tick.C
		wg.Go(func() { lat[i] = submit() })
	}
	tick.Stop()
	wg.Wait()
	ph.Paced = summarize(lat)

	// Copies of the recorded messages, round robin: two clients rarely
	// hold the same key at once (those get 409, counted apart).
	var dups, conflicts, pick atomic.Int64
	const dupFor = 3 * time.Second
	deadline := time.Now().Add(dupFor)
	for range 32 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				m := recorded[int(pick.Add(1))%len(recorded)]
				code, err := s.apiPost(ctx, c, m.id, m.order, false)
				switch {
				case err != nil:
					fail(err)
					return
				case code == http.StatusAccepted:
					dups.Add(1)
				case code == http.StatusConflict:
					conflicts.Add(1)
				default:
					fail(fmt.Errorf("copy of %s: status %d", m.id, code))
					return
				}
			}
		})
	}
	wg.Wait()
	ph.DuplicatePOSTs, ph.DuplicateConflicts = int(dups.Load()), int(conflicts.Load())
	ph.DuplicateRate = float64(dups.Load()) / dupFor.Seconds()

	// The waiters: a slow Stripe holds one workflow open while they wait.
	s.stripe.SetLatency(25 * time.Second)
	defer s.stripe.SetLatency(cfg.Latency)
	heldID, heldOrder := next()
	if code, err := s.apiPost(ctx, c, heldID, heldOrder, false); err != nil || code != http.StatusAccepted {
		return ph, fmt.Errorf("the held message: %d %w", code, err)
	}
	ph.Waiters = cfg.HTTPWaiters
	ph.RSSMBBefore, ph.GoroutinesBefore, ph.PGConnsBefore, _ = s.workerFootprint(ctx)
	var answered atomic.Int64
	for range cfg.HTTPWaiters {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.apiURL+"/v1/messages/order-placed/"+heldID, nil)
			if err != nil {
				fail(err)
				return
			}
			req.Header.Set("Authorization", "Bearer "+s.apiToken)
			req.Header.Set("Prefer", "wait=12")
			if code, err := s.apiDo(c, req); err != nil {
				fail(err)
			} else if code == http.StatusOK {
				answered.Add(1)
			}
		})
	}
	time.Sleep(8 * time.Second)
	ph.RSSMBDuring, ph.GoroutinesDuring, ph.PGConnsDuring, ph.PGBusyDuring = s.workerFootprint(ctx)
	wg.Wait()
	ph.WaitersAnswered = int(answered.Load())
	if len(errs) > 0 {
		return ph, fmt.Errorf("%d requests failed, the first: %w", len(errs), errors.Join(errs[0]))
	}
	return ph, nil
}

var goroutinesLine = regexp.MustCompile(`(?m)^go_goroutines ([0-9.e+]+)$`)

// workerFootprint reads the worker's RSS, its goroutines (from its
// /metrics) and the run database's Postgres connections, open and busy
// (this query's own excluded).
func (s *stack) workerFootprint(ctx context.Context) (rssMB, goroutines float64, pgConns, pgBusy int) {
	rssMB = float64(statusKB(s.worker.Pid(), "VmRSS")) / 1024
	if body, err := scrape(ctx, s.workerMetrics); err == nil {
		if m := goroutinesLine.FindStringSubmatch(body); m != nil {
			goroutines, _ = strconv.ParseFloat(m[1], 64)
		}
	}
	_ = s.admin.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state <> 'idle') FROM pg_stat_activity WHERE datname = $1`, s.dbName).Scan(&pgConns, &pgBusy)
	return rssMB, goroutines, pgConns, pgBusy
}

// short is one log line of the phase; burst is the JetStream burst's rate.
func (h HTTPPhase) short(burst float64) string {
	return fmt.Sprintf("max %.1f submit+wait/s; paced %.1f/s: p50 %s ms p99 %s ms; duplicate POSTs %.0f/s (%d, %d conflicts; JetStream burst %.0f/s); %d waiters (%d answered): worker RSS %.0f → %.0f MB, goroutines %.0f → %.0f, Postgres connections %d → %d (%d busy)",
		h.MaxRate, h.PacedRate, fmtMS(h.Paced.P50), fmtMS(h.Paced.P99), h.DuplicateRate, h.DuplicatePOSTs, h.DuplicateConflicts, burst, h.Waiters, h.WaitersAnswered,
		h.RSSMBBefore, h.RSSMBDuring, h.GoroutinesBefore, h.GoroutinesDuring, h.PGConnsBefore, h.PGConnsDuring, h.PGBusyDuring)
}

// httpSection renders the phase for the report.
func (r Report) httpSection() string {
	h := r.HTTP
	if h == nil {
		return ""
	}
	return fmt.Sprintf("\n## HTTP intake\n\n| figure | measured |\n|---|---|\n"+
		"| submit + wait (`Prefer: wait`) until the workflow closes, closed loop of %d clients | %.1f/s |\n"+
		"| the same paced at %.0f%% (%.1f/s): p50 / p99 | %s ms / %s ms |\n"+
		"| duplicate POSTs: copies of the recorded messages, 32 clients, 3 s (202s; 409s apart) | %.0f/s (%d; %d conflicts); JetStream duplicate burst %.0f/s |\n"+
		"| %d waiters (`GET … Prefer: wait=12` on a workflow held open), %d answered | worker RSS %.0f → %.0f MB, goroutines %.0f → %.0f, Postgres connections open %d → %d, busy while waiting %d |\n",
		r.Config.InFlight, h.MaxRate, pacedShare*100, h.PacedRate, fmtMS(h.Paced.P50), fmtMS(h.Paced.P99), h.DuplicateRate, h.DuplicatePOSTs, h.DuplicateConflicts, r.Burst.Rate,
		h.Waiters, h.WaitersAnswered, h.RSSMBBefore, h.RSSMBDuring, h.GoroutinesBefore, h.GoroutinesDuring, h.PGConnsBefore, h.PGConnsDuring, h.PGBusyDuring)
}

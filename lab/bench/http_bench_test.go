package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/httpapi"
	"github.com/effectively/effectively/tools/testenv"
)

// BenchmarkHTTPIntake is the HTTP phase of the bench: submit + wait
// (Prefer: wait) p50/p99 at 80% of the closed-loop max rate, duplicate
// POSTs per second, and 1,000 concurrent waiters (memory, goroutines and
// Postgres connections held). Run it once:
//
//	TEMPORAL_CLI=$PWD/bin/temporal go test -run '^$' -bench BenchmarkHTTPIntake -benchtime 1x ./lab/bench
func BenchmarkHTTPIntake(b *testing.B) {
	s := testenv.NewStack(b, testenv.StackOptions{})
	tokens := filepath.Join(b.TempDir(), "tokens")
	const token = "tok_bench_0123456789abcdef"
	if err := os.WriteFile(tokens, []byte("bench "+httpapi.HashToken(token)+" order.placed\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	serve := func(in *intake.Intake) string {
		api, err := httpapi.New(in, s.Client, nil, httpapi.Config{Addr: "127.0.0.1:0", TokensFile: tokens, TokenRate: 100000, MaxWait: 30 * time.Second, Logger: testenv.Logger(b)})
		if err != nil {
			b.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		b.Cleanup(cancel)
		go func() { _ = api.ServeOn(ctx, ln) }()
		return "http://" + ln.Addr().String()
	}
	base := serve(s.Intake)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2000}, Timeout: 60 * time.Second}
	seq := atomic.Int64{}
	post := func(base, id string, order int64, wait bool) (int, time.Duration) {
		body := fmt.Appendf(nil, `{"type":"order.placed","data":{"order_id":%d,"amount":1999,"currency":"usd","customer_email":"ada@example.com","payment_method":"pm_card_visa"}}`, order)
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Idempotency-Key", id)
		if wait {
			req.Header.Set("Prefer", "wait=30")
		}
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Error(err)
			return 0, 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, time.Since(start)
	}
	fresh := func() (string, int64) {
		n := seq.Add(1)
		return fmt.Sprintf("evt_hb%d", n), 500000 + n
	}

	// Closed loop: 16 clients submit and wait, as fast as they can.
	const loopN, clients = 200, 16
	start := time.Now()
	var wg sync.WaitGroup
	work := make(chan struct{}, loopN)
	for range loopN {
		work <- struct{}{}
	}
	close(work)
	for range clients {
		wg.Go(func() {
			for range work {
				id, o := fresh()
				if code, _ := post(base, id, o, true); code != http.StatusAccepted {
					b.Errorf("status %d", code)
				}
			}
		})
	}
	wg.Wait()
	maxRate := float64(loopN) / time.Since(start).Seconds()

	// Paced at 80% of it: one submit + wait every 1/rate.
	const pacedN = 200
	rate := 0.8 * maxRate
	lat := make([]time.Duration, pacedN)
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	for i := range pacedN {
		<-tick.C
		wg.Go(func() {
			id, o := fresh()
			code, d := post(base, id, o, true)
			if code != http.StatusAccepted {
				b.Errorf("status %d", code)
			}
			lat[i] = d
		})
	}
	tick.Stop()
	wg.Wait()
	slices.Sort(lat)
	p50, p99 := lat[pacedN/2], lat[pacedN*99/100]

	// Duplicate POSTs: 32 clients repeat one recorded message for 3 s.
	dupID, dupOrder := fresh()
	post(base, dupID, dupOrder, true)
	var dups atomic.Int64
	deadline := time.Now().Add(3 * time.Second)
	for range 32 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				if code, _ := post(base, dupID, dupOrder, false); code == http.StatusAccepted {
					dups.Add(1)
				}
			}
		})
	}
	wg.Wait()
	dupRate := float64(dups.Load()) / 3

	// 1,000 waiters on a workflow that never closes (no worker polls its
	// task queue), measured while they hold.
	idle, err := intake.New(s.Store, s.Client, intake.Config{TaskQueue: "bench-nobody-polls", Logger: testenv.Logger(b)})
	if err != nil {
		b.Fatal(err)
	}
	idleBase := serve(idle)
	stuck, stuckOrder := fresh()
	post(idleBase, stuck, stuckOrder, false)
	conns := func() int {
		var n int
		if err := s.Store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	runtime.GC()
	var before, during runtime.MemStats
	runtime.ReadMemStats(&before)
	connsBefore, goBefore := conns(), runtime.NumGoroutine()
	const waiters = 1000
	var answered atomic.Int64
	for range waiters {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, idleBase+"/v1/messages/order-placed/"+stuck, nil)
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Prefer", "wait=15")
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				answered.Add(1)
			}
		})
	}
	time.Sleep(8 * time.Second)
	runtime.ReadMemStats(&during)
	connsDuring, goDuring := conns(), runtime.NumGoroutine()
	wg.Wait()

	if c := s.Sims.Stripe.Stats(); c.Charges != loopN+pacedN+1 {
		b.Errorf("charges %d, want %d: one per message", c.Charges, loopN+pacedN+1)
	}
	var dupRow store.MessageStatus
	if dupRow, err = s.Store.Status(context.Background(), "order-placed", dupID); err != nil || dupRow.Inbox == nil {
		b.Fatal(err)
	}
	b.ReportMetric(maxRate, "max_submit+wait/s")
	b.ReportMetric(float64(p50.Milliseconds()), "p50_ms@80%")
	b.ReportMetric(float64(p99.Milliseconds()), "p99_ms@80%")
	b.ReportMetric(dupRate, "duplicate_POSTs/s")
	b.ReportMetric(float64(during.HeapInuse-before.HeapInuse)/waiters/1024, "KiB_heap/waiter")
	b.ReportMetric(float64(goDuring-goBefore)/waiters, "goroutines/waiter")
	b.ReportMetric(float64(connsDuring-connsBefore), "pg_conns_added_by_1000_waiters")
	b.Logf("max %.1f submit+wait/s (16 clients); paced at %.1f/s: p50 %s p99 %s; duplicate POSTs %.0f/s (%d copies counted on the row); "+
		"1000 waiters: heap +%.1f MiB, goroutines +%d, Postgres connections %d → %d, %d answered 200",
		maxRate, rate, p50.Round(time.Millisecond), p99.Round(time.Millisecond), dupRate, dupRow.Inbox.Duplicates,
		float64(during.HeapInuse-before.HeapInuse)/(1<<20), goDuring-goBefore, connsBefore, connsDuring, answered.Load())
}

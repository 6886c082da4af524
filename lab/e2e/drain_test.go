package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/tools/workerproc"
)

// TestSIGTERMRestartsMidBurst deploys twice in the middle of a burst: the
// worker process gets SIGTERM, and a new one starts once it has exited. The providers are slow (300 ms a call) and never fail, so every
// repeated effect is the deploy's fault. A worker that stopped by cancelling
// the effects in flight sent receipts twice (the issue saw 30 in 300
// orders); a draining one finishes each provider call and its record first.
func TestSIGTERMRestartsMidBurst(t *testing.T) {
	const orders = 300
	s := newProcStack(t, "LOG_LEVEL=info")
	// Every call is slow, none fails: 300 ms, half of it before the
	// provider acts and half after, as on a real network.
	s.cfg.StripeURL = slowProvider(t, s.sims.Stripe, 300*time.Millisecond)
	s.cfg.SendGridURL = slowProvider(t, s.sims.SendGrid, 300*time.Millisecond)

	workers := []*workerproc.Proc{s.start(t)}
	ids := make([]string, orders)
	for i := range ids {
		ids[i] = fmt.Sprintf("evt_drain_%03d", i)
	}

	ctx := context.Background()
	var (
		wg      sync.WaitGroup
		sendErr = make(chan error, orders)
		next    = make(chan int)
	)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				res, err := s.intake.Accept(ctx, order(ids[i], int64(5000+i), "pm_card_visa"), "test")
				if err != nil || res.Status != intake.StatusStarted {
					sendErr <- fmt.Errorf("accept %s = %+v: %w", ids[i], res, err)
				}
			}
		})
	}
	go func() {
		for i := range ids {
			next <- i
			time.Sleep(10 * time.Millisecond) // a burst over ~3 s
		}
		close(next)
	}()

	// Two deploys while the burst is being worked on, as `docker compose
	// up` recreates a container: SIGTERM to the running worker, then the
	// new one starts.
	for deploy := 1; deploy <= 2; deploy++ {
		time.Sleep(1500 * time.Millisecond)
		old := workers[len(workers)-1]
		stopped := time.Now()
		old.Stop(30 * time.Second)
		workers = append(workers, s.start(t))
		if old.Killed() {
			t.Fatalf("deploy %d: the old worker did not stop within 30s of SIGTERM and was killed; logs:\n%s", deploy, tail(old.Logs(), 40))
		}
		if err := old.Err(); err != nil {
			t.Errorf("deploy %d: the old worker exited with %v", deploy, err)
		}
		t.Logf("deploy %d: old worker stopped in %s", deploy, time.Since(stopped).Round(time.Millisecond))
		drained := ""
		for _, line := range strings.Split(old.Logs(), "\n") {
			if strings.Contains(line, `"msg":"effects drained"`) {
				drained = line
			}
		}
		if drained == "" {
			t.Errorf("deploy %d: the old worker did not report its drain; logs:\n%s", deploy, tail(old.Logs(), 20))
		}
		t.Logf("deploy %d: %s", deploy, drained)
	}
	wg.Wait()
	close(sendErr)
	for err := range sendErr {
		t.Fatal(err)
	}

	// Every message terminal, charged once, one receipt.
	var dupReceipts, multiCharges, notCompleted int
	for _, id := range ids {
		st := s.waitOutcome(t, id)
		if st.Outcome != "completed" {
			notCompleted++
			t.Errorf("%s: outcome %q (%+v)", id, st.Outcome, st)
		}
	}
	stripe, mail := s.sims.Stripe.Stats(), s.sims.SendGrid.Stats()
	for _, id := range ids {
		if n := stripe.ChargesByMessage[id]; n != 1 {
			multiCharges++
			t.Errorf("%s: %d charges, want 1", id, n)
		}
		if n := mail.DeliveriesByKey["email:"+id]; n != 1 {
			if n > 1 {
				dupReceipts += n - 1
			}
			t.Errorf("%s: %d receipts, want 1", id, n)
		}
		ms, err := s.store.Status(ctx, message.ConsumerOrderPlaced, id)
		if err != nil {
			t.Fatal(err)
		}
		if ms.Processed == nil || ms.Processed.Outcome != store.OutcomePaid {
			t.Errorf("%s: processed %+v", id, ms.Processed)
		}
	}
	// A replayed Stripe answer is a charge whose record a stop cut off: the
	// key saved the customer, but the effect ran twice.
	if stripe.Replays != 0 {
		t.Errorf("stripe replayed %d answers: charges were cut between the call and the record: %v", stripe.Replays, stripe.ReplaysByKey)
		for key := range stripe.ReplaysByKey {
			id := key[strings.LastIndex(key, ":")+1:]
			for n, w := range workers {
				t.Logf("worker %d on %s:\n%s", n, id, linesWith(w.Logs(), id))
			}
		}
	}
	t.Logf("%d orders, 2 SIGTERM deploys: %d duplicate receipts, %d orders charged other than once, %d not completed; stripe charges %d, replayed answers %d; receipts %d",
		orders, dupReceipts, multiCharges, notCompleted, stripe.Charges, stripe.Replays, mail.Deliveries)
}

// slowProvider serves h with latency d: half before the request reaches
// the provider (a client that goes away meanwhile is never served) and half
// after it acted, on the way back. A call cancelled in the second half has
// taken effect without its caller knowing: the window a worker stop must
// not cut.
func slowProvider(t *testing.T, h http.Handler, d time.Duration) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(d / 2):
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r.WithContext(context.WithoutCancel(r.Context())))
		time.Sleep(d / 2)
		maps.Copy(w.Header(), rec.Header())
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// linesWith is the lines of logs that contain s.
func linesWith(logs, s string) string {
	var out []string
	for line := range strings.SplitSeq(logs, "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// tail is the last n lines of logs.
func tail(logs string, n int) string {
	lines := strings.Split(strings.TrimRight(logs, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/message"
	"github.com/effectively/effectively/internal/sim/sendgridsim"
	"github.com/effectively/effectively/internal/sim/stripesim"
	"github.com/effectively/effectively/internal/store"
	"github.com/effectively/effectively/internal/workerproc"
)

// TestSIGTERMRestartsMidBurst deploys twice in the middle of a burst, as a
// rolling deploy does: a new worker process starts, the old one gets
// SIGTERM. The providers are slow (300 ms a call) and never fail, so every
// repeated effect is the deploy's fault. A worker that stopped by cancelling
// the effects in flight sent receipts twice (the issue saw 30 in 300
// orders); a draining one finishes each provider call and its record first.
func TestSIGTERMRestartsMidBurst(t *testing.T) {
	const orders = 300
	s := newProcStack(t, "LOG_LEVEL=info")
	// Every call is slow, none fails.
	s.sims.Stripe.AddFault(stripesim.Fault{Kind: stripesim.FaultDelay, Delay: 300 * time.Millisecond})
	s.sims.SendGrid.AddFault(sendgridsim.Fault{Kind: sendgridsim.FaultDelay, Delay: 300 * time.Millisecond})

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
					sendErr <- fmt.Errorf("accept %s = %+v, %v", ids[i], res, err)
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

	// Two deploys while the burst is being worked on.
	for deploy := 1; deploy <= 2; deploy++ {
		time.Sleep(1500 * time.Millisecond)
		old := workers[len(workers)-1]
		workers = append(workers, s.start(t))
		stopped := time.Now()
		old.Stop(30 * time.Second)
		if old.Killed() {
			t.Fatalf("deploy %d: the old worker did not stop within 30s of SIGTERM and was killed; logs:\n%s", deploy, tail(old.Logs(), 40))
		}
		if err := old.Err(); err != nil {
			t.Errorf("deploy %d: the old worker exited with %v", deploy, err)
		}
		t.Logf("deploy %d: old worker stopped in %s", deploy, time.Since(stopped).Round(time.Millisecond))
		if !strings.Contains(old.Logs(), `"msg":"effects drained"`) {
			t.Errorf("deploy %d: the old worker did not report its drain; logs:\n%s", deploy, tail(old.Logs(), 20))
		}
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
	t.Logf("%d orders, 2 SIGTERM deploys: %d duplicate receipts, %d orders charged other than once, %d not completed; stripe charges %d, replayed answers %d; receipts %d",
		orders, dupReceipts, multiCharges, notCompleted, stripe.Charges, stripe.Replays, mail.Deliveries)
}

// tail is the last n lines of logs.
func tail(logs string, n int) string {
	lines := strings.Split(strings.TrimRight(logs, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

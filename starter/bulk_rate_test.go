package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/adapter/ratelimit"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/sim/simlimit"
	"github.com/effectively/effectively/sim/stripesim"
	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/workflows"
)

// limitProfile is the simulators' rate limits and the worker's shared
// limiter at 80% of them, as docs/operations.md advises.
type limitProfile struct {
	name string
	// The simulators answer 429 past these (requests/s): Stripe's global
	// and per endpoint, SendGrid's per key.
	simGlobal, simEndpoint, simSendGrid float64
	// The worker's STRIPE_RATE_LIMIT, STRIPE_ENDPOINT_RATE_LIMIT,
	// SENDGRID_RATE_LIMIT.
	global, endpoint, sendGrid float64
	// atDefault and atHundred are how many runs are redriven at the default
	// --rate and at --rate 100.
	atDefault, atHundred int
}

// messageRate is the most order messages a second the worker's limits
// admit: each makes a create and a confirm (two Stripe endpoints) and one
// mail (docs/operations.md).
func (p limitProfile) messageRate() float64 {
	return min(p.endpoint, p.global/2, p.sendGrid)
}

// redrivePhase is what one bulk redrive of the test measured.
type redrivePhase struct {
	rows            int
	issued          float64 // rows/s the starter issued (its summary)
	completed       float64 // messages/s that reached their receipt, from the command's start
	requests, too   int     // requests to both simulators, and their 429s
	replays         int     // Stripe answers replayed for a key used before (an attempt retried)
	stripeByOp      map[string]int
	issuedFor, took time.Duration
}

func (p redrivePhase) String() string {
	share := 0.0
	if p.requests > 0 {
		share = float64(p.too) / float64(p.requests)
	}
	return fmt.Sprintf("%d rows: issued %.1f rows/s over %s, completed %.1f msg/s (last receipt %s after the start), %d 429s in %d requests (%.2f%%), Stripe by operation %v, %d replayed by their key",
		p.rows, p.issued, p.issuedFor.Round(time.Millisecond), p.completed, p.took.Round(time.Millisecond), p.too, p.requests, 100*share, p.stripeByOp, p.replays)
}

// TestBulkRedriveAtTheLimits measures a bulk redrive against rate-limited
// simulators, at Stripe's live limits (100/s for the account, 25/s per
// endpoint) and a sandbox's (25/s for the account), SendGrid at 25/s, the
// worker's shared limiter at 80% of each: runs terminated during a Stripe
// outage are redriven at --rate 100, above what the limits admit, and
// (sandbox) at the default rate. Each message is charged once with one
// receipt; the simulators answer under 1% 429s; and the messages complete
// no faster than the worker's limit (plus its burst): the limiter, not the
// starter's rate, bounds a bulk redrive. The figures are logged
// (docs/runbook.md, "Bulk actions", quotes them).
func TestBulkRedriveAtTheLimits(t *testing.T) {
	for _, p := range []limitProfile{
		{name: "live", simGlobal: 100, simEndpoint: 25, simSendGrid: 25, global: 80, endpoint: 20, sendGrid: 20, atHundred: 200},
		{name: "sandbox", simGlobal: 25, simEndpoint: 25, simSendGrid: 25, global: 20, endpoint: 20, sendGrid: 20, atDefault: 40, atHundred: 150},
	} {
		t.Run(p.name, func(t *testing.T) { bulkRedriveAtTheLimits(t, p) })
	}
}

func bulkRedriveAtTheLimits(t *testing.T, lp limitProfile) {
	s := operatorStackWith(t, testenv.StackOptions{RateLimits: config.RateLimits{
		Stripe:         ratelimit.Rate{PerSecond: lp.global},
		StripeEndpoint: ratelimit.Rate{PerSecond: lp.endpoint},
		SendGrid:       ratelimit.Rate{PerSecond: lp.sendGrid},
	}})
	s.Sims.Stripe.SetRateLimits(stripesim.RateLimits{
		Global:   simlimit.Rate{PerSecond: lp.simGlobal},
		Endpoint: simlimit.Rate{PerSecond: lp.simEndpoint},
	})
	s.Sims.SendGrid.SetRateLimit(simlimit.Rate{PerSecond: lp.simSendGrid})
	var slowIDs, fastIDs []string
	for i := range lp.atDefault + lp.atHundred {
		// The fast ones sort after the slow ones: the default-rate run
		// stops before them with --max.
		id := fmt.Sprintf("evt_rate_a_%03d", i)
		if i >= lp.atDefault {
			id = fmt.Sprintf("evt_rate_b_%03d", i)
			fastIDs = append(fastIDs, id)
		} else {
			slowIDs = append(slowIDs, id)
		}
	}
	all := append(append([]string{}, slowIDs...), fastIDs...)
	outage(t, s, all)

	measure := func(ids []string, args ...string) redrivePhase {
		t.Helper()
		s0, g0 := s.Sims.Stripe.Stats(), s.Sims.SendGrid.Stats()
		start := time.Now()
		code, out, errOut := runStarter(t, append([]string{"redrive", "--state", "claimed"}, args...)...)
		rows, sum := bulkLines(t, out)
		if sum.ByResult["done"] != len(ids) || len(rows) != len(ids) || rows[0].MessageID != ids[0] || rows[len(rows)-1].MessageID != ids[len(ids)-1] {
			t.Fatalf("bulk redrive %v: exit %d, summary %+v, stderr %s; want %s…%s done", args, code, sum, errOut, ids[0], ids[len(ids)-1])
		}
		last := awaitReceipts(t, s, ids)
		s1, g1 := s.Sims.Stripe.Stats(), s.Sims.SendGrid.Stats()
		p := redrivePhase{rows: len(ids), issued: sum.Rate, took: last.Sub(start),
			requests:   s1.Requests - s0.Requests + g1.Requests - g0.Requests,
			too:        s1.RateLimited - s0.RateLimited + g1.RateLimited - g0.RateLimited,
			replays:    s1.Replays - s0.Replays,
			stripeByOp: map[string]int{}}
		p.issuedFor, _ = time.ParseDuration(sum.Elapsed)
		p.completed = float64(len(ids)) / p.took.Seconds()
		for op, n := range s1.RequestsByOperation {
			if d := n - s0.RequestsByOperation[op]; d > 0 {
				p.stripeByOp[op] = d
			}
		}
		if p.requests == 0 || float64(p.too) >= 0.01*float64(p.requests) {
			t.Errorf("bulk redrive %v: %d 429s in %d requests; want under 1%%", args, p.too, p.requests)
		}
		return p
	}
	t.Logf("simulators: Stripe %g/s global and %g/s per endpoint, SendGrid %g/s; worker: STRIPE_RATE_LIMIT=%g STRIPE_ENDPOINT_RATE_LIMIT=%g SENDGRID_RATE_LIMIT=%g: at most %g msg/s",
		lp.simGlobal, lp.simEndpoint, lp.simSendGrid, lp.global, lp.endpoint, lp.sendGrid, lp.messageRate())
	if len(slowIDs) > 0 {
		t.Logf("bulk redrive at the default --rate 5: %s", measure(slowIDs, "--max", fmt.Sprint(len(slowIDs))))
	}
	fast := measure(fastIDs, "--rate", "100")
	t.Logf("bulk redrive at --rate 100: %s", fast)

	for _, id := range all {
		if c := s.Sims.Stripe.Stats().ChargesByMessage[id]; c != 1 {
			t.Errorf("%s charged %d times, want 1", id, c)
		}
		if m := s.Sims.SendGrid.Stats().DeliveriesByKey["email:"+id]; m != 1 {
			t.Errorf("%s: %d receipts, want 1", id, m)
		}
	}
	// At most messageRate a second once the buckets' burst (one second's
	// worth) is spent; 10% over it is the tolerance of clocks.
	limit := lp.messageRate()
	if most := 1.1 * limit * float64(len(fastIDs)) / (float64(len(fastIDs)) - limit); fast.completed > most {
		t.Errorf("--rate 100 completed %.1f msg/s: above the worker's limit (%.1f with its burst)", fast.completed, most)
	}
	if fast.issued <= 1.1*limit {
		t.Logf("the starter issued %.1f rows/s, not above the limit: the limit was not tested hard", fast.issued)
	}
}

// outage makes ids' runs fail with nothing charged: Stripe answers every
// request 429 while the orders are placed and their payments claimed, and
// the runs are terminated. It returns once no attempt of theirs is left
// (the simulator has seen no request for 3 s: a request waiting for its
// slot in the shared limiter would have been sent meanwhile, as the
// reserved slots follow each other at the limit's pace), then ends the
// outage.
func outage(t *testing.T, s *testenv.Stack, ids []string) {
	t.Helper()
	ctx := context.Background()
	s.Sims.Stripe.AddFault(stripesim.Fault{Kind: stripesim.FaultRateLimit, Times: 1 << 20})
	for i, id := range ids {
		placeOrder(t, s, id, int64(1000+i), "pm_card_visa")
	}
	for _, id := range ids {
		waitPayment(t, s, id, store.PaymentClaimed)
		if err := s.Client.TerminateWorkflow(ctx, "order-placed/"+id, "", "test: stopped during the outage"); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for seen, quiet := s.Sims.Stripe.Stats().Requests, time.Now(); time.Since(quiet) < 3*time.Second; time.Sleep(100 * time.Millisecond) {
		if n := s.Sims.Stripe.Stats().Requests; n != seen {
			seen, quiet = n, time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatal("attempts of the terminated runs still reach Stripe after a minute")
		}
	}
	s.Sims.Stripe.ClearFaults()
	for _, id := range ids {
		if p, err := s.Store.PaymentOf(ctx, "order-placed", id); err != nil || p.State != store.PaymentClaimed || p.PaymentIntentID != "" {
			t.Fatalf("after the outage, %s's payment is %+v, %v; want claimed with no PaymentIntent", id, p, err)
		}
	}
}

// awaitReceipts waits until each of ids has its receipt recorded sent and
// its workflow completed, and returns when the last receipt was recorded.
func awaitReceipts(t *testing.T, s *testenv.Stack, ids []string) time.Time {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(90 * time.Second)
	for {
		var n int
		var last *time.Time
		if err := s.Store.Pool().QueryRow(ctx, `
			SELECT count(*), max(updated_at) FROM effects
			 WHERE consumer = 'order-placed' AND message_id = ANY($1) AND kind = 'email' AND state = 'succeeded'`, ids).Scan(&n, &last); err != nil {
			t.Fatal(err)
		}
		if n == len(ids) {
			for _, id := range []string{ids[0], ids[len(ids)-1]} {
				if st, err := workflowResult(t, s, id); err != nil || st.Outcome != workflows.OutcomeCompleted {
					t.Errorf("%s: %+v, %v; want completed", id, st, err)
				}
			}
			return *last
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d receipts sent after 90 s", n, len(ids))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

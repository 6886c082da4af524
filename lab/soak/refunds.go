package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake/route"
	"github.com/effectively/effectively/internal/leaf/identity"
	"github.com/effectively/effectively/sim/sendgridsim"
	"github.com/effectively/effectively/sim/stripesim"
	"github.com/effectively/effectively/workflows"
)

// RefundReport is what the refund phase found.
type RefundReport struct {
	// Messages counts refund messages sent, copies included; Unique the
	// distinct ones.
	Messages int `json:"messages"`
	Unique   int `json:"unique"`
	// Refunded, Exceeded and NotPaid count the recorded outcomes.
	Refunded int `json:"refunded"`
	Exceeded int `json:"exceeded"`
	NotPaid  int `json:"not_paid"`
	// OverRefunds counts payments whose refunds exceed what they charged,
	// at Stripe or in Postgres, and refund messages refunded more than
	// once. It must be 0.
	OverRefunds int `json:"over_refunds"`
	// StripeRefused counts refunds Stripe refused for exceeding the charge:
	// the database decides first, so it must be 0.
	StripeRefused int `json:"stripe_refused"`
	// Faults counts refunds given a Stripe fault.
	Faults int `json:"faults"`
	// Receipts are the refund receipts' figures.
	Receipts ReceiptFigures `json:"receipts"`
}

func (r RefundReport) String() string {
	return fmt.Sprintf("refunds %d (unique %d, %d with a stripe fault): refunded %d, beyond the payment %d, order not paid %d; over-refunds %d (must be 0), refused by stripe %d (must be 0)\n",
		r.Messages, r.Unique, r.Faults, r.Refunded, r.Exceeded, r.NotPaid, r.OverRefunds, r.StripeRefused)
}

// plannedRefund is one refund message of the refund phase.
type plannedRefund struct {
	id      string
	orderID int64
	amount  int64
	// pair is the ID of the refund that competes with this one for the
	// same payment: together they are one more than it charged, so
	// exactly one of the two is refunded. Empty for a lone refund.
	pair string
	// notPaid is set for a refund of a declined order.
	notPaid bool
	// lostMail is set when the refund receipt's first send is accepted by
	// SendGrid with the answer lost.
	lostMail bool
	raw      []byte
}

// planRefunds picks orders to refund among the unique messages: a share
// of the paid ones get either a lone refund within the payment or two
// competing refunds that cannot both fit, and a few declined ones get a
// refund that must be refused as not paid.
func planRefunds(p plan, rng *rand.Rand) []plannedRefund {
	var out []plannedRefund
	add := func(r plannedRefund) {
		r.raw = fmt.Appendf(nil, `{"id":%q,"type":"order.refund_requested","data":{"order_id":%d,"amount":%d,"reason":"requested_by_customer"}}`,
			r.id, r.orderID, r.amount)
		out = append(out, r)
	}
	for i, u := range p.unique {
		m, err := route.Default().Decode(u.raw)
		if err != nil {
			continue
		}
		o, ok := m.Value.(*message.OrderPlaced)
		if !ok {
			continue
		}
		id := fmt.Sprintf("%s_refund", u.id)
		switch {
		case p.declined[u.id]:
			if rng.IntN(2) == 0 {
				add(plannedRefund{id: id, orderID: o.OrderID, amount: 1, notPaid: true})
			}
		case o.Amount >= 2 && rng.IntN(5) == 0:
			// Two halves that are one too many together.
			half := o.Amount / 2
			a, b := id+"_a", id+"_b"
			add(plannedRefund{id: a, orderID: o.OrderID, amount: half, pair: b})
			add(plannedRefund{id: b, orderID: o.OrderID, amount: o.Amount - half + 1, pair: a})
		case i%5 == 1:
			add(plannedRefund{id: id, orderID: o.OrderID, amount: 1 + rng.Int64N(o.Amount)})
		}
	}
	return out
}

// runRefunds is the refund phase, after every order settled: it sends the
// planned refunds in random order with copies, kills a worker meanwhile,
// waits for every refund workflow and reconciles Stripe and Postgres.
func runRefunds(ctx context.Context, cfg Config, st Stack, p plan, rng *rand.Rand, w *workers) (RefundReport, []string, error) {
	refunds := planRefunds(p, rng)
	rep := RefundReport{Unique: len(refunds)}
	var sends [][]byte
	for _, r := range refunds {
		sends = append(sends, r.raw)
		if rng.IntN(4) == 0 {
			sends = append(sends, r.raw) // a copy
		}
	}
	// Stripe faults on a share of the refunds: a 503 before Stripe acts, a
	// 500 saved after it refunded (ambiguous: settled by listing the
	// PaymentIntent's refunds), a response lost after it refunded.
	// SendGrid loses the answer to a share of the refund receipts' first
	// sends, as it does for the order receipts.
	for i := range refunds {
		if r := &refunds[i]; !r.notPaid && rng.Float64() < cfg.LostSendRatio {
			st.SendGrid.AddFault(sendgridsim.Fault{Match: sendgridsim.Match{MessageID: r.id}, Kind: sendgridsim.FaultLostAfter, Times: 1})
			r.lostMail = true
		}
	}
	for _, r := range refunds {
		if r.notPaid || rng.IntN(10) != 0 {
			continue
		}
		match := stripesim.Match{MessageID: r.id}
		switch rng.IntN(3) {
		case 0:
			st.Stripe.AddFault(stripesim.Fault{Match: match, Kind: stripesim.FaultErrorBefore, Status: 503, Times: 1})
		case 1:
			st.Stripe.AddFault(stripesim.Fault{Match: match, Kind: stripesim.FaultErrorAfter, Times: 1})
		case 2:
			st.Stripe.AddFault(stripesim.Fault{Match: match, Kind: stripesim.FaultLostAfter, Times: 1})
		}
		rep.Faults++
	}
	rng.Shuffle(len(sends), func(i, j int) { sends[i], sends[j] = sends[j], sends[i] })
	rep.Messages = len(sends)
	cfg.Logf("soak: sending %d refund messages (%d unique)", len(sends), len(refunds))

	killed := make(chan struct{})
	go func() {
		defer close(killed)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(300+rng.IntN(700)) * time.Millisecond):
			if err := w.killOne(rng.IntN(cfg.Workers)); err != nil {
				cfg.Logf("soak: restart after kill: %v", err)
			}
			cfg.Logf("soak: killed a worker during the refunds")
		}
	}()
	order := make([]int, len(sends))
	unique := make([]planned, len(sends))
	for i, raw := range sends {
		order[i], unique[i] = i, planned{raw: raw}
	}
	if err := sendAll(ctx, st.Send, cfg.Concurrency, order, unique, nil); err != nil {
		return rep, nil, err
	}
	<-killed
	violations := waitRefunds(ctx, st, refunds, cfg.Settle, cfg.Logf)
	v, err := reconcileRefunds(ctx, st, refunds, &rep)
	return rep, append(violations, v...), err
}

// waitRefunds waits until every refund workflow has closed.
func waitRefunds(ctx context.Context, st Stack, refunds []plannedRefund, settle time.Duration, logf func(string, ...any)) []string {
	deadline := time.Now().Add(settle)
	var (
		mu       sync.Mutex
		problems []string
		wg       sync.WaitGroup
		sem      = make(chan struct{}, 32)
	)
	for _, r := range refunds {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			wfID, _ := identity.WorkflowID(message.ConsumerRefundRequested, r.id)
			for {
				var res workflows.RefundStatus
				callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := st.Temporal.GetWorkflow(callCtx, wfID, "").Get(callCtx, &res)
				cancel()
				var (
					notFound *serviceerror.NotFound
					timedOut *serviceerror.DeadlineExceeded
				)
				switch {
				case err == nil:
					return
				case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &timedOut) || errors.As(err, &notFound):
				default:
					mu.Lock()
					problems = append(problems, fmt.Sprintf("%s: refund workflow failed: %v", r.id, err))
					mu.Unlock()
					return
				}
				if time.Now().After(deadline) || ctx.Err() != nil {
					mu.Lock()
					problems = append(problems, fmt.Sprintf("%s: refund workflow not completed after %s (%s)", r.id, settle, describe(ctx, st.Temporal, wfID)))
					mu.Unlock()
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	sort.Strings(problems)
	logf("soak: refund workflows settled, %d problems", len(problems))
	return problems
}

// reconcileRefunds checks every refund against Stripe and Postgres.
func reconcileRefunds(ctx context.Context, st Stack, refunds []plannedRefund, rep *RefundReport) ([]string, error) {
	stripe, mail := st.Stripe.Stats(), st.SendGrid.Stats()
	rep.StripeRefused = stripe.RefundsRefused
	var violations []string
	if stripe.RefundsRefused != 0 {
		violations = append(violations, fmt.Sprintf("stripe refused %d refunds for exceeding the charge: the database let them through", stripe.RefundsRefused))
	}
	db := store.New(st.Pool)
	outcomes := map[string]store.Outcome{}
	refundedAt := map[int64]int64{} // Stripe refunds per order, from the messages
	for _, r := range refunds {
		ms, err := db.Status(ctx, message.ConsumerRefundRequested, r.id)
		if err != nil {
			return violations, err
		}
		if ms.Processed == nil {
			violations = append(violations, fmt.Sprintf("%s: refund has no processed row (lost)", r.id))
			continue
		}
		o := ms.Processed.Outcome
		outcomes[r.id] = o
		n := stripe.RefundsByMessage[r.id]
		emails := mail.DeliveriesByKey[identity.MustKey(identity.EffectRefundEmail, r.id)]
		rep.Receipts.add(emails, r.lostMail)
		switch o {
		case store.OutcomeRefunded:
			rep.Refunded++
			refundedAt[r.orderID] += r.amount
			if n != 1 || emails == 0 || emails > 2 {
				violations = append(violations, fmt.Sprintf("%s: refunded with %d stripe refunds and %d receipts", r.id, n, emails))
			}
		case store.OutcomeRefundExceedsPayment:
			rep.Exceeded++
		case store.OutcomeOrderNotPaid:
			rep.NotPaid++
		default:
			violations = append(violations, fmt.Sprintf("%s: refund outcome %s", r.id, o))
		}
		if n > 1 {
			rep.OverRefunds++
			violations = append(violations, fmt.Sprintf("%s refunded %d times", r.id, n))
		}
		if o != store.OutcomeRefunded && (n != 0 || emails != 0) {
			violations = append(violations, fmt.Sprintf("%s: %s but %d stripe refunds, %d receipts", r.id, o, n, emails))
		}
		if r.notPaid && o != store.OutcomeOrderNotPaid {
			violations = append(violations, fmt.Sprintf("%s: refund of a declined order is %s", r.id, o))
		}
	}
	for _, r := range refunds {
		if r.pair == "" || r.id > r.pair {
			continue
		}
		a, b := outcomes[r.id], outcomes[r.pair]
		if (a == store.OutcomeRefunded) == (b == store.OutcomeRefunded) {
			violations = append(violations, fmt.Sprintf("%s and %s compete for one payment: %s and %s, want exactly one refunded", r.id, r.pair, a, b))
		}
	}
	for orderID, sum := range refundedAt {
		refunded, paid, err := db.RefundedAmount(ctx, orderID)
		if err != nil {
			return violations, err
		}
		if sum > paid || refunded > paid || refunded != sum {
			rep.OverRefunds++
			violations = append(violations, fmt.Sprintf("order %d: paid %d, refunds at stripe %d, recorded %d", orderID, paid, sum, refunded))
		}
	}
	return violations, nil
}

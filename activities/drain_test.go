package activities_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/effectively/effectively/activities"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/sim/sendgridsim"
	"github.com/effectively/effectively/sim/stripesim"
)

func receipt(id string, order int64) activities.ReceiptInput {
	return activities.ReceiptInput{Consumer: "order-placed", MessageID: id, OrderID: order, Amount: 1999, Currency: "usd", To: "a@example.com", PaymentIntentID: "pi_x"}
}

// TestDrainFinishesAnEffectWhoseActivityIsCancelled: the SDK cancels a
// local activity's context the moment the worker stops. With a Drainer the
// send goes on, the receipt is recorded, and Wait returns once it is; a
// retry then finds it in the ledger instead of sending it again.
func TestDrainFinishesAnEffectWhoseActivityIsCancelled(t *testing.T) {
	f := newFixture(t, store.AtLeastOnce)
	f.acts.Drain = &activities.Drainer{}
	f.sims.SendGrid.AddFault(sendgridsim.Fault{Kind: sendgridsim.FaultDelay, Delay: 800 * time.Millisecond})
	in := receipt("evt_drain_cancel", 71)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	done := make(chan error, 1)
	go func() {
		_, err := f.acts.SendReceipt(ctx, in)
		done <- err
	}()
	time.Sleep(300 * time.Millisecond) // the send is at SendGrid now
	if n := f.acts.Drain.InFlight(); n != 1 {
		t.Fatalf("in flight = %d, want 1", n)
	}
	cancel() // "worker stopping"
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if left, err := f.acts.Drain.Wait(wctx); err != nil {
		t.Fatalf("drain: %d left: %v", left, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the cancelled send did not finish: %v", err)
	}
	e, err := f.db.Effect(context.Background(), "email:"+in.MessageID)
	if err != nil || e.State != store.StateSucceeded {
		t.Fatalf("ledger = %+v, %v; want succeeded", e, err)
	}
	if n := f.sims.SendGrid.Stats().DeliveriesByKey["email:"+in.MessageID]; n != 1 {
		t.Fatalf("deliveries = %d, want 1", n)
	}
}

// TestDrainRefusesNewEffects: once the worker drains, an effect fails
// retryably before it claims anything, so the attempt runs elsewhere.
func TestDrainRefusesNewEffects(t *testing.T) {
	f := newFixture(t, store.AtLeastOnce)
	f.acts.Drain = &activities.Drainer{}
	f.acts.Drain.Close()
	in := receipt("evt_drain_refused", 72)
	_, err := run(t, f, f.acts.SendReceipt, in)
	if !isType(err, activities.ErrTypeDraining) {
		t.Fatalf("err = %v, want type %s", err, activities.ErrTypeDraining)
	}
	if _, err := f.db.Effect(context.Background(), "email:"+in.MessageID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused effect claimed its ledger row: %v", err)
	}
	if n := f.sims.SendGrid.Stats().Deliveries; n != 0 {
		t.Fatalf("deliveries = %d, want 0", n)
	}
}

// TestDrainWaitIsBounded: what outlives the drain timeout is reported, not
// waited for.
func TestDrainWaitIsBounded(t *testing.T) {
	f := newFixture(t, store.AtLeastOnce)
	f.acts.Drain = &activities.Drainer{}
	f.sims.SendGrid.AddFault(sendgridsim.Fault{Kind: sendgridsim.FaultDelay, Delay: 3 * time.Second})
	go func() { _, _ = f.acts.SendReceipt(context.Background(), receipt("evt_drain_slow", 73)) }()
	time.Sleep(300 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	left, err := f.acts.Drain.Wait(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || left != 1 {
		t.Fatalf("wait = %d, %v; want 1 left after the deadline", left, err)
	}
}

// TestSlowEffectHeartbeats: a regular activity heartbeats while its
// provider call runs, so the HeartbeatTimeout the workflows set (10s)
// notices a dead worker and never a slow provider.
func TestSlowEffectHeartbeats(t *testing.T) {
	f := newFixture(t, store.AtLeastOnce)
	f.acts.Drain = &activities.Drainer{}
	f.sims.SendGrid.AddFault(sendgridsim.Fault{Kind: sendgridsim.FaultDelay, Delay: 4500 * time.Millisecond})
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	var beats atomic.Int32
	// The SDK batches heartbeats on their way to the server; the
	// interceptor sees every call.
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{&beatCounter{n: &beats}}})
	env.RegisterActivity(f.acts)
	if _, err := env.ExecuteActivity(f.acts.SendReceipt, receipt("evt_drain_beat", 74)); err != nil {
		t.Fatal(err)
	}
	// One at the start, then one every 2s of the 4.5s call.
	if n := beats.Load(); n < 3 {
		t.Fatalf("heartbeats = %d, want at least 3", n)
	}
}

type beatCounter struct {
	interceptor.WorkerInterceptorBase
	n *atomic.Int32
}

func (b *beatCounter) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &beatInbound{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, n: b.n}
}

type beatInbound struct {
	interceptor.ActivityInboundInterceptorBase
	n *atomic.Int32
}

func (b *beatInbound) Init(outbound interceptor.ActivityOutboundInterceptor) error {
	return b.Next.Init(&beatOutbound{ActivityOutboundInterceptorBase: interceptor.ActivityOutboundInterceptorBase{Next: outbound}, n: b.n})
}

type beatOutbound struct {
	interceptor.ActivityOutboundInterceptorBase
	n *atomic.Int32
}

func (b *beatOutbound) RecordHeartbeat(ctx context.Context, details ...any) {
	b.n.Add(1)
	b.Next.RecordHeartbeat(ctx, details...)
}

// TestDrainCoversRefunds: a refund and its receipt are effects like a
// charge and a receipt: once the worker drains they are refused before they
// claim anything (and, running, they finish rather than being cancelled).
func TestDrainCoversRefunds(t *testing.T) {
	f := newFixture(t, store.AtLeastOnce)
	f.acts.Drain = &activities.Drainer{}
	f.acts.Drain.Close()
	if _, err := run(t, f, f.acts.RefundOrder, refundOf("evt_drain_refund", 73, 100)); !isType(err, activities.ErrTypeDraining) {
		t.Fatalf("refund: err = %v, want type %s", err, activities.ErrTypeDraining)
	}
	rin := activities.RefundReceiptInput{Consumer: "order-refund", MessageID: "evt_drain_refund", OrderID: 73, Amount: 100, Currency: "usd", RefundID: "re_x"}
	if _, err := run(t, f, f.acts.SendRefundReceipt, rin); !isType(err, activities.ErrTypeDraining) {
		t.Fatalf("refund receipt: err = %v, want type %s", err, activities.ErrTypeDraining)
	}
	// Their local first attempts too: the error comes back as data, for
	// the workflow to go on as a regular activity on a worker still running.
	if lr := runLocally(t, f, f.acts.RefundOrderLocally, refundOf("evt_drain_refund", 73, 100)); lr.Err == nil || lr.Err.Type != activities.ErrTypeDraining {
		t.Fatalf("local refund: %+v, want type %s", lr, activities.ErrTypeDraining)
	}
	if lm := runLocally(t, f, f.acts.SendRefundReceiptLocally, rin); lm.Err == nil || lm.Err.Type != activities.ErrTypeDraining {
		t.Fatalf("local refund receipt: %+v, want type %s", lm, activities.ErrTypeDraining)
	}
	for _, key := range []string{"refundemail:evt_drain_refund", "email:evt_drain_refund"} {
		if _, err := f.db.Effect(context.Background(), key); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a refused refund receipt claimed its ledger row %s: %v", key, err)
		}
	}
	if n := f.sims.Stripe.Stats().Refunds; n != 0 {
		t.Fatalf("refunds = %d, want 0", n)
	}
}

// TestDrainFinishesCancelledRefundEffects: SIGTERM while a refund and then
// its receipt are at the provider. The SDK cancels the activity's context;
// each effect finishes its call and its record under the drain, and a retry
// finds it recorded: one refund, one refund receipt.
func TestDrainFinishesCancelledRefundEffects(t *testing.T) {
	f := newFixture(t, store.AtLeastOnce)
	f.acts.Drain = &activities.Drainer{}
	paid(t, f, "evt_dr_p", 74)
	in := refundOf("evt_dr", 74, 100)
	cancelMidCall := func(call func(context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		done := make(chan error, 1)
		go func() { done <- call(ctx) }()
		time.Sleep(300 * time.Millisecond) // the call is at the provider now
		cancel()                           // "worker stopping"
		if err := <-done; err != nil {
			t.Fatalf("the cancelled effect did not finish: %v", err)
		}
	}
	f.sims.Stripe.AddFault(stripesim.Fault{Match: stripesim.Match{MessageID: "evt_dr"}, Kind: stripesim.FaultDelay, Delay: 800 * time.Millisecond, Times: 1})
	var refundID string
	cancelMidCall(func(ctx context.Context) error {
		r, err := f.acts.RefundOrder(ctx, in)
		refundID = r.RefundID
		return err
	})
	rin := activities.RefundReceiptInput{Consumer: "order-refund", MessageID: "evt_dr", OrderID: 74, Amount: 100, Currency: "usd", RefundID: refundID}
	f.sims.SendGrid.AddFault(sendgridsim.Fault{Match: sendgridsim.Match{MessageID: "evt_dr"}, Kind: sendgridsim.FaultDelay, Delay: 800 * time.Millisecond, Times: 1})
	cancelMidCall(func(ctx context.Context) error {
		_, err := f.acts.SendRefundReceipt(ctx, rin)
		return err
	})
	if r, err := run(t, f, f.acts.RefundOrder, in); err != nil || !r.Recorded {
		t.Fatalf("refund retry = %+v, %v; want recorded", r, err)
	}
	if r, err := run(t, f, f.acts.SendRefundReceipt, rin); err != nil || !r.Recorded {
		t.Fatalf("refund receipt retry = %+v, %v; want recorded", r, err)
	}
	if n, m := f.sims.Stripe.Stats().RefundsByMessage["evt_dr"], f.sims.SendGrid.Stats().DeliveriesByKey["refundemail:evt_dr"]; n != 1 || m != 1 {
		t.Fatalf("refunds %d, refund receipts %d; want 1 each", n, m)
	}
}

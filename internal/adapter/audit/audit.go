// Package audit compares the ledger with the providers' own records:
// Stripe's PaymentIntents and Refunds, read with the paginating list APIs
// (strongly consistent, unlike Search), and SendGrid's events as the
// webhook recorded them. Each difference is kept once per (kind, object)
// in audit_findings (store.RecordFinding), so a rerun adds nothing.
//
// An audit covers a window of creation times, cut in slices; it counts its
// Stripe requests and stops at Config.MaxRequests. Resume keeps a
// checkpoint (the end of the last slice done), so the next run goes on
// from there; a slice that did not fit in a whole run's budget is halved
// for the next. docs/operations.md ("The audit") says what it costs.
package audit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/store"
)

// Defaults applied by New.
const (
	// DefaultMaxRequests bounds the Stripe requests of one run.
	DefaultMaxRequests = 1000
	// DefaultSlice is the length of the windows audited at a time.
	DefaultSlice = time.Hour
	// DefaultLag keeps a scheduled audit this far behind now, so that
	// effects in flight have settled before they are compared.
	DefaultLag = 15 * time.Minute
	// DefaultEventBound is how long after a receipt was recorded sent
	// SendGrid's first event must have arrived.
	DefaultEventBound = 15 * time.Minute
	// DefaultLookback is how far back the first scheduled run starts.
	DefaultLookback = 24 * time.Hour
)

// ErrBudget is returned, wrapped, when a run spent its Stripe request
// budget before the window was done: the report says how far it got.
var ErrBudget = errors.New("audit: stripe request budget spent")

// Config configures an Auditor. Zero values take the defaults.
type Config struct {
	// MaxRequests bounds the Stripe requests of one run. Default
	// DefaultMaxRequests.
	MaxRequests int
	// Slice is the length of the windows audited at a time. Default
	// DefaultSlice.
	Slice time.Duration
	// Lag keeps Resume this far behind now. Default DefaultLag.
	Lag time.Duration
	// Receipts compares receipts with SendGrid's events: set it when the
	// SendGrid Event Webhook is configured.
	Receipts bool
	// EventBound is how long a receipt may wait for its first SendGrid
	// event. Default DefaultEventBound.
	EventBound time.Duration
	// Lookback is how far back the first Resume starts. Default
	// DefaultLookback.
	Lookback time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Auditor runs audits. It is safe for concurrent use, though two runs of
// one checkpoint would do the same work twice.
type Auditor struct {
	store  *store.Store
	stripe *payment.Client
	cfg    Config
}

// New returns an Auditor reading st and Stripe through pay.
func New(st *store.Store, pay *payment.Client, cfg Config) (*Auditor, error) {
	if st == nil || pay == nil {
		return nil, errors.New("audit: a store and a Stripe client are required")
	}
	if cfg.MaxRequests < 0 || cfg.Slice < 0 || cfg.Lag < 0 || cfg.EventBound < 0 || cfg.Lookback < 0 {
		return nil, errors.New("audit: MaxRequests, Slice, Lag, EventBound and Lookback must not be negative")
	}
	if cfg.MaxRequests == 0 {
		cfg.MaxRequests = DefaultMaxRequests
	}
	if cfg.Slice == 0 {
		cfg.Slice = DefaultSlice
	}
	cfg.Slice = max(cfg.Slice.Truncate(time.Second), time.Second)
	if cfg.Lag == 0 {
		cfg.Lag = DefaultLag
	}
	if cfg.EventBound == 0 {
		cfg.EventBound = DefaultEventBound
	}
	if cfg.Lookback == 0 {
		cfg.Lookback = DefaultLookback
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Auditor{store: st, stripe: pay, cfg: cfg}, nil
}

// Reported is a finding of one run; New says it was not kept before.
type Reported struct {
	store.Finding
	New bool `json:"new"`
}

// Report is what one run did.
type Report struct {
	// From and To are the window asked for (From inclusive, To exclusive).
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// AuditedUntil: everything from From until it is audited.
	AuditedUntil time.Time `json:"audited_until"`
	// Complete reports that the whole window was audited.
	Complete bool `json:"complete"`
	// Requests counts the Stripe requests made; Listed the PaymentIntents
	// of this deployment listed.
	Requests int `json:"stripe_requests"`
	Listed   int `json:"payment_intents_listed"`
	// Findings are the findings of this run, each once, as kept (first
	// detail, resolution if any); New counts the ones not kept before, and
	// Resolved the ones an operator marked resolved (`starter audit
	// resolve`): found again, they stay resolved.
	Findings []Reported `json:"-"`
	New      int        `json:"new_findings"`
	Found    int        `json:"findings"`
	Resolved int        `json:"resolved_findings"`
}

// run is the state of one run.
type run struct {
	a    *Auditor
	rep  *Report
	seen map[string]bool // kind/object reported in this run
}

func (r *run) take() error {
	if r.rep.Requests >= r.a.cfg.MaxRequests {
		return fmt.Errorf("%w (%d requests)", ErrBudget, r.a.cfg.MaxRequests)
	}
	r.rep.Requests++
	return nil
}

// call makes one list request against the budget. A 429 is honoured: the
// same request is made again after a pause (250 ms, doubling to 8 s, at
// most 8 times), each try counted against the budget, so that an audit
// slows down behind the provider's rate limit instead of failing.
func (r *run) call(ctx context.Context, do func() error) error {
	pause := 250 * time.Millisecond
	for try := 0; ; try++ {
		if err := r.take(); err != nil {
			return err
		}
		err := do()
		var pe *payment.Error
		if err == nil {
			return nil
		}
		if try >= 8 || !errors.As(err, &pe) || pe.Class != payment.ClassRateLimited {
			return fmt.Errorf("audit: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 8*time.Second)
	}
}

func (r *run) report(ctx context.Context, f store.Finding) error {
	k := string(f.Kind) + "/" + f.Object
	if r.seen[k] {
		return nil
	}
	r.seen[k] = true
	kept, isNew, err := r.a.store.RecordFinding(ctx, f)
	if err != nil {
		return err
	}
	r.rep.Findings = append(r.rep.Findings, Reported{Finding: kept, New: isNew})
	r.rep.Found++
	if isNew {
		r.rep.New++
	}
	if kept.ResolvedAt != nil {
		r.rep.Resolved++
	}
	return nil
}

// Window audits [from, to) slice by slice, without a checkpoint (`starter
// audit`). When the budget is spent it returns the report so far and an
// error wrapping ErrBudget: AuditedUntil is where to go on from.
func (a *Auditor) Window(ctx context.Context, from, to time.Time) (Report, error) {
	// Whole seconds, as Stripe's created times are: to is rounded up, so a
	// window ending now holds what was created this second.
	from = from.Truncate(time.Second).UTC()
	if t := to.Truncate(time.Second); t.Before(to) {
		to = t.Add(time.Second)
	}
	to = to.UTC()
	rep := Report{From: from, To: to, AuditedUntil: from}
	if !to.After(from) {
		return rep, fmt.Errorf("audit: the window ends (%s) before it starts (%s)", to.Format(time.RFC3339), from.Format(time.RFC3339))
	}
	r := &run{a: a, rep: &rep, seen: map[string]bool{}}
	for start := from; start.Before(to); start = start.Add(a.cfg.Slice) {
		end := minTime(start.Add(a.cfg.Slice), to)
		if err := r.slice(ctx, start, end); err != nil {
			return rep, err
		}
		rep.AuditedUntil = end
	}
	rep.Complete = true
	return rep, nil
}

// Resume audits from checkpoint name up to now minus the lag (and minus
// the event bound when receipts are compared), saving the checkpoint after
// each slice. The first run starts Lookback ago. A slice that did not fit
// in a whole run's budget is halved for the next run.
func (a *Auditor) Resume(ctx context.Context, name string) (Report, error) {
	now := a.cfg.Now().UTC()
	lag := a.cfg.Lag
	if a.cfg.Receipts {
		lag = max(lag, a.cfg.EventBound)
	}
	until := now.Add(-lag).Truncate(time.Second)
	cp, ok, err := a.store.AuditCheckpointOf(ctx, name)
	if err != nil {
		return Report{}, err
	}
	if !ok {
		cp = store.AuditCheckpoint{AuditedUntil: until.Add(-a.cfg.Lookback), Slice: a.cfg.Slice}
	}
	cp.Slice = min(cp.Slice, a.cfg.Slice)
	rep := Report{From: cp.AuditedUntil.UTC(), To: until, AuditedUntil: cp.AuditedUntil.UTC()}
	r := &run{a: a, rep: &rep, seen: map[string]bool{}}
	for start := rep.From; start.Before(until); {
		end := minTime(start.Add(cp.Slice), until)
		spent := rep.Requests
		if err := r.slice(ctx, start, end); err != nil {
			if errors.Is(err, ErrBudget) && spent == 0 && cp.Slice > time.Second {
				cp.Slice = max((cp.Slice / 2).Truncate(time.Second), time.Second)
				if serr := a.store.SaveAuditCheckpoint(ctx, name, cp); serr != nil {
					return rep, errors.Join(err, serr)
				}
			}
			return rep, err
		}
		cp.AuditedUntil = end
		if err := a.store.SaveAuditCheckpoint(ctx, name, cp); err != nil {
			return rep, err
		}
		rep.AuditedUntil, start = end, end
	}
	rep.Complete = true
	return rep, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// slice audits [from, to): Stripe's PaymentIntents against the ledger,
// the ledger's succeeded payments against Stripe, the refunds, the
// receipts.
func (r *run) slice(ctx context.Context, from, to time.Time) error {
	listed, err := r.intents(ctx, from, to)
	if err != nil {
		return err
	}
	pays, err := r.a.store.AuditSucceededPayments(ctx, from, to)
	if err != nil {
		return err
	}
	if err := r.payments(ctx, from, to, pays, listed); err != nil {
		return err
	}
	if err := r.refunds(ctx, from, to, pays); err != nil {
		return err
	}
	if r.a.cfg.Receipts {
		return r.receipts(ctx, from, to)
	}
	return nil
}

// intents lists the window's PaymentIntents of this deployment and
// compares each with the ledger rows that name it, its message or its
// order.
func (r *run) intents(ctx context.Context, from, to time.Time) (map[string]payment.ListedIntent, error) {
	listed := map[string]payment.ListedIntent{}
	var ours []payment.ListedIntent
	for after := ""; ; {
		var page []payment.ListedIntent
		var more bool
		if err := r.call(ctx, func() (err error) {
			page, more, err = r.a.stripe.ListIntentsPage(ctx, from, to.Add(-time.Second), after)
			return err
		}); err != nil {
			return nil, err
		}
		for _, pi := range page {
			if r.a.stripe.Ours(pi.Namespace) && pi.MessageID != "" {
				listed[pi.PaymentIntentID] = pi
				ours = append(ours, pi)
			}
		}
		if !more || len(page) == 0 {
			break
		}
		after = page[len(page)-1].PaymentIntentID
	}
	r.rep.Listed += len(ours)
	if len(ours) == 0 {
		return listed, nil
	}
	var ids, msgs []string
	var orders []int64
	for _, pi := range ours {
		ids, msgs = append(ids, pi.PaymentIntentID), append(msgs, pi.MessageID)
		if pi.OrderID != 0 {
			orders = append(orders, pi.OrderID)
		}
	}
	rows, err := r.a.store.AuditPaymentsOf(ctx, ids, msgs, orders)
	if err != nil {
		return nil, err
	}
	byPI, byMsg, byOrder := map[string]store.AuditPayment{}, map[string]store.AuditPayment{}, map[int64]store.AuditPayment{}
	for _, p := range rows {
		if p.PaymentIntentID != "" {
			byPI[p.PaymentIntentID] = p
		}
		byMsg[p.MessageID], byOrder[p.OrderID] = p, p
	}
	slices.SortFunc(ours, func(a, b payment.ListedIntent) int { return a.Created.Compare(b.Created) })
	for _, pi := range ours {
		if err := r.intent(ctx, pi, listed, byPI, byMsg, byOrder); err != nil {
			return nil, err
		}
	}
	return listed, nil
}

func (r *run) intent(ctx context.Context, pi payment.ListedIntent, listed map[string]payment.ListedIntent,
	byPI, byMsg map[string]store.AuditPayment, byOrder map[int64]store.AuditPayment) error {
	succeeded := pi.Succeeded()
	if p, ok := byPI[pi.PaymentIntentID]; ok {
		switch {
		case succeeded && p.State != store.PaymentSucceeded:
			return r.report(ctx, moneyWithoutRecord(pi, &p, "the payment is "+string(p.State)))
		case !succeeded && p.State == store.PaymentSucceeded:
			return r.report(ctx, recordWithoutMoney(p, pi.PaymentIntentID, "the payment intent is "+pi.Status))
		case succeeded:
			return r.compareAmount(ctx, p, &pi.Charge)
		}
		return nil
	}
	if !succeeded {
		return nil // moved no money and no record names it: a failed or abandoned attempt
	}
	other, object := byMsg[pi.MessageID], "message:"+pi.MessageID
	if other.MessageID == "" && pi.OrderID != 0 {
		other, object = byOrder[pi.OrderID], "order:"+strconv.FormatInt(pi.OrderID, 10)
	}
	if other.MessageID == "" {
		return r.report(ctx, moneyWithoutRecord(pi, nil, "no payment of its message or order is recorded"))
	}
	if other.State == store.PaymentSucceeded && other.PaymentIntentID != "" {
		status, err := r.status(ctx, other.PaymentIntentID, listed)
		if err != nil {
			return err
		}
		if status == payment.StatusSucceeded {
			return r.report(ctx, store.Finding{
				Kind: store.FindingDuplicateCharge, Object: object, Consumer: other.Consumer, MessageID: pi.MessageID,
				OrderID: other.OrderID, StripeIDs: []string{other.PaymentIntentID, pi.PaymentIntentID}, LedgerRef: other.Key,
				Detail: fmt.Sprintf("%s and %s both succeeded; the ledger records %s", other.PaymentIntentID, pi.PaymentIntentID, other.PaymentIntentID),
			})
		}
	}
	return r.report(ctx, moneyWithoutRecord(pi, &other, "the ledger's payment of its message or order is "+string(other.State)+
		" and names "+orNone(other.PaymentIntentID)))
}

func orNone(s string) string {
	if s == "" {
		return "no payment intent"
	}
	return s
}

// status returns PaymentIntent id's status: from the listing when it is
// there, else by a retrieve ("" when it does not exist).
func (r *run) status(ctx context.Context, id string, listed map[string]payment.ListedIntent) (string, error) {
	if pi, ok := listed[id]; ok {
		return pi.Status, nil
	}
	ch, err := r.get(ctx, id)
	if err != nil || ch == nil {
		return "", err
	}
	return ch.Status, nil
}

// get retrieves a PaymentIntent; nil when it does not exist.
func (r *run) get(ctx context.Context, id string) (*payment.Charge, error) {
	if err := r.take(); err != nil {
		return nil, err
	}
	ch, err := r.a.stripe.Get(ctx, id)
	if errors.Is(err, payment.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return ch, nil
}

func moneyWithoutRecord(pi payment.ListedIntent, p *store.AuditPayment, why string) store.Finding {
	f := store.Finding{
		Kind: store.FindingMoneyWithoutRecord, Object: pi.PaymentIntentID, MessageID: pi.MessageID, OrderID: pi.OrderID,
		StripeIDs: []string{pi.PaymentIntentID},
		Detail:    fmt.Sprintf("%s succeeded (%d %s) for message %s: %s", pi.PaymentIntentID, pi.Amount, pi.Currency, pi.MessageID, why),
	}
	if p != nil {
		f.Consumer, f.LedgerRef = p.Consumer, p.Key
	}
	return f
}

func recordWithoutMoney(p store.AuditPayment, piID, why string) store.Finding {
	f := store.Finding{
		Kind: store.FindingRecordWithoutMoney, Object: p.Key, Consumer: p.Consumer, MessageID: p.MessageID,
		OrderID: p.OrderID, LedgerRef: p.Key,
		Detail: fmt.Sprintf("payment %s of order %d is recorded succeeded (%d %s): %s", p.Key, p.OrderID, p.Amount, p.Currency, why),
	}
	if piID != "" {
		f.StripeIDs = []string{piID}
	}
	return f
}

func (r *run) compareAmount(ctx context.Context, p store.AuditPayment, ch *payment.Charge) error {
	if ch.Amount == p.Amount && strings.EqualFold(ch.Currency, p.Currency) {
		return nil
	}
	return r.report(ctx, store.Finding{
		Kind: store.FindingAmountMismatch, Object: ch.PaymentIntentID, Consumer: p.Consumer, MessageID: p.MessageID,
		OrderID: p.OrderID, StripeIDs: []string{ch.PaymentIntentID}, LedgerRef: p.Key,
		Detail: fmt.Sprintf("%s charged %d %s; the ledger records %d %s", ch.PaymentIntentID, ch.Amount, ch.Currency, p.Amount, p.Currency),
	})
}

// payments checks the succeeded payments claimed or settled in [from, to)
// whose PaymentIntent the listing did not hold: each is retrieved.
func (r *run) payments(ctx context.Context, from, to time.Time, pays []store.AuditPayment, listed map[string]payment.ListedIntent) error {
	in := func(t time.Time) bool { return !t.Before(from) && t.Before(to) }
	for _, p := range pays {
		if !in(p.CreatedAt) && !in(p.UpdatedAt) {
			continue // in the list for a refund of the window
		}
		if _, ok := listed[p.PaymentIntentID]; ok {
			continue // compared with its listed PaymentIntent
		}
		if p.PaymentIntentID == "" {
			if err := r.report(ctx, recordWithoutMoney(p, "", "no payment intent is recorded")); err != nil {
				return err
			}
			continue
		}
		ch, err := r.get(ctx, p.PaymentIntentID)
		switch {
		case err != nil:
			return err
		case ch == nil:
			err = r.report(ctx, recordWithoutMoney(p, p.PaymentIntentID, p.PaymentIntentID+" does not exist at Stripe"))
		case !ch.Succeeded():
			err = r.report(ctx, recordWithoutMoney(p, p.PaymentIntentID, "the payment intent is "+ch.Status))
		default:
			err = r.compareAmount(ctx, p, ch)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// refunds compares, for each PaymentIntent of the ledger refunded in
// [from, to) on either side, the sum of its refunds at Stripe with the
// payment's refunded_amount. A payment with a refund still claimed is
// skipped: its outcome is not recorded yet.
func (r *run) refunds(ctx context.Context, from, to time.Time, pays []store.AuditPayment) error {
	touched := map[string]bool{}
	for after := ""; ; {
		var page []payment.ListedRefund
		var more bool
		if err := r.call(ctx, func() (err error) {
			page, more, err = r.a.stripe.ListRefundsPage(ctx, "", from, to.Add(-time.Second), after)
			return err
		}); err != nil {
			return err
		}
		for _, re := range page {
			touched[re.PaymentIntentID] = true
		}
		if !more || len(page) == 0 {
			break
		}
		after = page[len(page)-1].ID
	}
	for _, p := range pays {
		if p.Refunded > 0 && p.PaymentIntentID != "" {
			touched[p.PaymentIntentID] = true
		}
	}
	if len(touched) == 0 {
		return nil
	}
	ids := make([]string, 0, len(touched))
	for id := range touched {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	rows, err := r.a.store.AuditPaymentsOf(ctx, ids, nil, nil)
	if err != nil {
		return err
	}
	for _, p := range rows {
		if p.RefundsOpen > 0 || !touched[p.PaymentIntentID] {
			continue
		}
		var sum int64
		var refundIDs []string
		for after := ""; ; {
			var page []payment.ListedRefund
			var more bool
			if err := r.call(ctx, func() (err error) {
				page, more, err = r.a.stripe.ListRefundsPage(ctx, p.PaymentIntentID, time.Time{}, time.Time{}, after)
				return err
			}); err != nil {
				return err
			}
			for _, re := range page {
				if !re.Failed() {
					sum += re.Amount
					refundIDs = append(refundIDs, re.ID)
				}
			}
			if !more || len(page) == 0 {
				break
			}
			after = page[len(page)-1].ID
		}
		if sum == p.Refunded {
			continue
		}
		if err := r.report(ctx, store.Finding{
			Kind: store.FindingRefundMismatch, Object: p.PaymentIntentID, Consumer: p.Consumer, MessageID: p.MessageID,
			OrderID: p.OrderID, StripeIDs: append([]string{p.PaymentIntentID}, refundIDs...), LedgerRef: p.Key,
			Detail: fmt.Sprintf("refunds of %s at Stripe sum to %d %s; the ledger's refunded_amount is %d", p.PaymentIntentID, sum, p.Currency, p.Refunded),
		}); err != nil {
			return err
		}
	}
	return nil
}

// receipts compares the mails recorded sent with SendGrid's events.
func (r *run) receipts(ctx context.Context, from, to time.Time) error {
	sentBefore := r.a.cfg.Now().Add(-r.a.cfg.EventBound)
	missing, err := r.a.store.ReceiptsWithoutEvent(ctx, from, to, sentBefore)
	if err != nil {
		return err
	}
	for _, e := range missing {
		if err := r.report(ctx, store.Finding{
			Kind: store.FindingReceiptWithoutEvent, Object: e.Key, Consumer: e.Consumer, MessageID: e.MessageID, LedgerRef: e.Key,
			Detail: fmt.Sprintf("mail %s is recorded sent (X-Message-Id %s) and SendGrid sent no event for it within %s", e.Key, orNone(e.ProviderRef), r.a.cfg.EventBound),
		}); err != nil {
			return err
		}
	}
	orphans, err := r.a.store.EventsWithoutReceipt(ctx, from, to)
	if err != nil {
		return err
	}
	for _, e := range orphans {
		if err := r.report(ctx, store.Finding{
			Kind: store.FindingEventWithoutReceipt, Object: e.Key,
			Detail: fmt.Sprintf("SendGrid reported mail %s (sg_message_id %s) and the ledger has no mail under that key", e.Key, e.ProviderRef),
		}); err != nil {
			return err
		}
	}
	return nil
}

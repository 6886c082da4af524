package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/reconcile"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/effect"
	"github.com/effectively/effectively/internal/leaf/failpoint"
	"github.com/effectively/effectively/internal/leaf/identity"
)

// ChargeInput is what ChargeOrder needs: everything comes from the message,
// so every attempt sends Stripe identical parameters.
type ChargeInput struct {
	Consumer      string `json:"consumer"`
	MessageID     string `json:"message_id"`
	OrderID       int64  `json:"order_id"`
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"payment_method"`
	// ReceiptTo, when set, is where the order's receipt goes: a local
	// attempt whose record settles the payment paid claims the receipt in
	// that record's transaction and sends it (see ChargeOrder). Empty (an
	// older workflow's input): the workflow's SendReceipt sends it.
	ReceiptTo string `json:"receipt_to,omitempty"`
	// ReceiptBudget is the time the receipt's send keeps at the end of the
	// attempt: the charge must be recorded that long before the attempt's
	// deadline, else no receipt is claimed with it. The time the receipt's
	// own first attempt would have, so a deadline falls between its send
	// and its record no sooner than there. Zero: no receipt with the charge.
	ReceiptBudget time.Duration `json:"receipt_budget,omitempty"`
	// Claim, when set, is the payment's claim the intake took in the
	// transaction that recorded the message (IntakeClaim). A local attempt
	// inside the key window takes it as its own instead of claiming; the
	// regular activity ignores it and claims (see ChargeOrder).
	Claim *message.Claim `json:"claim,omitempty"`
}

// request is the charge request as hashed for its ledger row: without
// ReceiptTo, ReceiptBudget and Claim, so the hash is the one an older worker's claim
// recorded, and the one the intake's claim records.
func (in ChargeInput) request() ChargeInput {
	in.ReceiptTo, in.ReceiptBudget, in.Claim = "", 0, nil
	return in
}

// IntakeClaim is the claim of in's payment that the intake takes in the
// transaction that records the message (store.InboxEntry.Payment): the
// order, key and request hash ChargeOrder's own claim would record.
func IntakeClaim(in ChargeInput) (store.PaymentClaim, error) {
	key, err := identity.Key(identity.EffectPayment, in.MessageID)
	if err != nil {
		return store.PaymentClaim{}, err
	}
	return store.PaymentClaim{Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID,
		Amount: in.Amount, Currency: in.Currency, Key: key, RequestHash: requestHash(in.request())}, nil
}

// marks is the workflow whose inbox row the payment's record marks
// dispatched. The attempt of a payment claimed at intake made no claim to
// mark it; any other attempt's claim marked it unless a transaction held
// the row at that moment (a copy's insert counting itself: the claim skips a
// locked row), and the record marks it then, instead of leaving it pending
// for a Dispatcher pass. The record only touches a row still pending.
func (in ChargeInput) marks() string {
	id, _ := identity.WorkflowID(in.Consumer, in.MessageID) // checked by the attempt first
	return id
}

// receipt is the receipt of in's order, paid by PaymentIntent piID: the
// very input the workflow gives SendReceipt, so both hash the same mail.
func (in ChargeInput) receipt(piID string) ReceiptInput {
	return ReceiptInput{Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID,
		Amount: in.Amount, Currency: in.Currency, To: in.ReceiptTo, PaymentIntentID: piID}
}

// PaymentOutcome is the outcome of ChargeOrder. Its values but processing
// are those the processed row records (store.Outcome).
type PaymentOutcome string

// Payment outcomes returned by ChargeOrder.
const (
	PaymentPaid              PaymentOutcome = "paid"
	PaymentFailed            PaymentOutcome = "payment_failed"
	PaymentBusinessDuplicate PaymentOutcome = "business_duplicate"
	// PaymentProcessing: Stripe is processing the payment; it settles
	// later (succeeded or failed). No receipt until it succeeds.
	PaymentProcessing PaymentOutcome = "processing"
)

// ChargeResult is the recorded outcome of ChargeOrder.
type ChargeResult struct {
	// Outcome is PaymentPaid, PaymentFailed, PaymentProcessing or
	// PaymentBusinessDuplicate.
	Outcome         PaymentOutcome `json:"outcome"`
	PaymentIntentID string         `json:"payment_intent_id,omitempty"`
	// FailureCode and DeclineCode explain a PaymentFailed.
	FailureCode string `json:"failure_code,omitempty"`
	DeclineCode string `json:"decline_code,omitempty"`
	// HeldBy is the message that holds the order, for a business duplicate.
	HeldBy string `json:"held_by,omitempty"`
	// Replayed is true when Stripe answered from its idempotency layer, and
	// Recorded when the outcome was already in Postgres (no call made).
	Replayed   bool `json:"replayed,omitempty"`
	Recorded   bool `json:"recorded,omitempty"`
	Reconciled bool `json:"reconciled,omitempty"`
	// Receipt is the receipt this attempt sent under the claim its record
	// took, as recorded; nil when it recorded none (the workflow's
	// SendReceipt then claims the receipt and sends it).
	Receipt *ReceiptResult `json:"receipt,omitempty"`

	// held is the receipt claim the record took, for this attempt alone:
	// never serialized, so no other attempt, and no replay, can hold it.
	held *heldReceipt
}

// heldReceipt is a receipt claimed by the record of a payment (in) or of a
// refund (to, refund).
type heldReceipt struct {
	in     ReceiptInput
	to     string
	refund RefundReceiptInput
	key    string
	token  int32
}

// ChargeOrderName is ChargeOrder's activity type name.
const ChargeOrderName = "ChargeOrder"

func init() { register(ChargeOrderName, func(a *Activities) any { return a.ChargeOrder }) }

// ChargeOrder charges the order of one message exactly once.
//
// Safe to retry: the order is claimed in Postgres first (payments.order_id is
// unique), then the PaymentIntent is created unconfirmed under the key
// "paymentintent:<message id>" and confirmed under "payment:<message id>",
// and what the confirmation says is recorded, with the PaymentIntent's ID,
// in one transaction: claim, create, confirm, record. The ID is not
// recorded on its own before the confirmation, because nothing needs it
// there: a retry within Stripe's key window creates again under the create
// key, which replays the same PaymentIntent (a PaymentIntent succeeds at most
// once, and the confirm key replays the confirmation), and a retry past the
// window that finds no ID recorded lists the claim's time window first
// (FindInWindow, strongly consistent) and goes on with the PaymentIntent it
// finds instead of creating one. An ambiguous confirmation (a replayed 500,
// a refusal) is settled by retrieving the PaymentIntent by ID, a strongly
// consistent read. The outcome commits with the message's processed row in
// one transaction.
//
// Only a succeeded PaymentIntent is recorded as paid. processing is
// recorded as such and returned as PaymentProcessing (the workflow waits
// for the outcome); requires_payment_method, canceled and requires_action
// (authentication, impossible off-session) are recorded refusals carrying
// Stripe's code; any other status is recorded unexpected and returned as a
// non-retryable ErrTypeUnexpectedState for an operator. A PaymentIntent
// found by a lookup (retrieve, list) whose amount, currency or payment
// method differs from the request's is not this payment: it is recorded
// unexpected the same way, never confirmed, paid or failed. A PaymentIntent
// found by a list has its ID recorded before it is confirmed (adopt), so
// later retries retrieve it rather than list again. Transport errors, 409,
// 429 and 5xx are returned as retryable errors.
//
// It runs on the effect protocol (effect.Run, with charging as its kind):
// the steps from the claim to the record run on a context that a worker
// stop does not cancel (beginEffect), so a deploy lets them finish; a 401
// or 403 is retried as ErrTypeProviderAuth and alerts, never recorded.
//
// A local attempt whose input carries the intake's claim (in.Claim, claim 1,
// taken in the transaction that recorded the message; the workflow passes it
// from its first task only) takes it as its own without a transaction of its
// own, while the claim is inside the key window: no claim before it can have
// reached Stripe. An attempt that runs again with the same token (one that
// outlived its first task on a worker that then died) sends Stripe the same
// requests under the same keys, which replay, and its record, a
// compare-and-set on the token and the row's open state, finds the first
// outcome recorded and changes nothing. Its record marks the inbox row
// dispatched. The regular activity, and a local attempt past the window,
// claim through the ledger as always, which counts the token up past the
// intake's.
//
// A local attempt whose input names the receipt's address (in.ReceiptTo)
// and keeps in.ReceiptBudget for it claims the receipt in the payment's
// record, and sends it under that claim (sendHeldReceipt); its charge runs
// on a deadline that much earlier than the attempt's. The regular activity
// leaves the receipt to the workflow's SendReceipt.
func (a *Activities) ChargeOrder(ctx context.Context, in ChargeInput) (ChargeResult, error) {
	// Only a local attempt takes the intake's claim, or sends the receipt.
	in.Claim, in.ReceiptTo, in.ReceiptBudget = nil, "", 0
	return a.charge(ctx, in)
}

// charge is ChargeOrder's attempt, with the intake's claim and the receipt
// when in carries them.
func (a *Activities) charge(ctx context.Context, in ChargeInput) (ChargeResult, error) {
	count := func(r ChargeResult, err error) { a.countCharge(in.Consumer, r, err) }
	return attempt(ctx, a, identity.EffectPayment, in.Consumer, in.MessageID, count, func(ctx context.Context, key string) (ChargeResult, error) {
		return a.chargeOrder(ctx, key, in)
	})
}

// chargeOrder is ChargeOrder's attempt under key.
func (a *Activities) chargeOrder(ctx context.Context, key string, in ChargeInput) (ChargeResult, error) {
	createKey := identity.MustKey(identity.EffectPaymentIntent, in.MessageID)
	lg := logger(ctx)
	// The claim marks the message's inbox row dispatched (the intake does
	// not, see route.Route.WorkflowMarksDispatched).
	wfID, err := identity.WorkflowID(in.Consumer, in.MessageID)
	if err != nil {
		return ChargeResult{}, temporal.NewNonRetryableApplicationError("bad message id", ErrTypeInvalidInput, err)
	}

	claim, err := a.claimPayment(ctx, key, wfID, in)
	if err != nil {
		return ChargeResult{}, fenced(fmt.Errorf("claim order %d: %w", in.OrderID, err))
	}
	switch claim.Outcome {
	case store.ClaimBusinessDuplicate:
		lg.Info("order already claimed by another message", "order_id", in.OrderID, "held_by", claim.Payment.MessageID)
		return ChargeResult{Outcome: PaymentBusinessDuplicate, HeldBy: claim.Payment.MessageID}, nil
	case store.ClaimDone:
		return recordedCharge(claim.Payment)
	case store.ClaimOwned:
		// This claim owns the payment: go on.
	}
	token := claim.Claim
	c := &charging{a: a, in: in, key: key, createKey: createKey, token: token, claimedAt: claim.Payment.CreatedAt, piID: claim.Payment.PaymentIntentID}
	failpoint.Hit(failpoint.PaymentAfterClaim)
	// The receipt keeps the end of the attempt: the charge runs on a
	// deadline ReceiptBudget before the attempt's. An attempt with less time
	// left than that sends no receipt.
	var budget time.Duration
	if in.ReceiptTo != "" {
		budget = in.ReceiptBudget
	}
	cctx, receiptBy, cancel := receiptDeadline(ctx, budget)
	defer cancel()
	c.receiptBy = receiptBy
	// The protocol (effect.Run): inside the key window the keys replay;
	// past it, the PaymentIntent is looked up (retrieved by its recorded ID,
	// or listed over the claim's window) before any create or confirm.
	at := effect.Attempt{Claim: token, ClaimedAt: claim.Payment.CreatedAt, KeyWindow: a.keyTrust()}
	res, err := effect.Run(cctx, at, a.now(), effect.Kind[*payment.Charge, ChargeResult](c))
	if err != nil {
		return res, a.boundary(ctx, metrics.EffectPayment, fmt.Sprintf("charge order %d", in.OrderID), err)
	}
	if res.held != nil {
		res.Receipt, res.held = a.sendHeldReceipt(ctx, *res.held), nil
	}
	return res, nil
}

// receiptDeadline is the context an effect's call runs on when its local
// attempt keeps budget for the receipt at its end: ctx with a deadline
// budget before ctx's, and that moment, before which the effect's record
// must begin for the receipt to be claimed with it. With no budget, or no
// more time left than budget: ctx itself and a zero time (no receipt with
// the effect).
func receiptDeadline(ctx context.Context, budget time.Duration) (context.Context, time.Time, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if budget <= 0 || !ok || time.Until(deadline) <= budget {
		return ctx, time.Time{}, func() {}
	}
	by := deadline.Add(-budget)
	cctx, cancel := context.WithDeadline(ctx, by)
	return cctx, by, cancel
}

// sendHeldReceipt sends the receipt under the claim the payment's record
// took in its own transaction (h), and records the outcome (sendHeld).
func (a *Activities) sendHeldReceipt(ctx context.Context, h heldReceipt) *ReceiptResult {
	return a.sendHeld(ctx, &mailing{a: a, kind: metrics.EffectReceipt, what: fmt.Sprintf("receipt of order %d", h.in.OrderID),
		orderID: h.in.OrderID, statusOrder: h.in.OrderID, key: h.key, token: h.token, mail: receiptMail(h.key, h.in)}, "SendReceipt")
}

// sendHeld sends m's mail under the claim an effect's record took in its
// own transaction (m.token), and records the outcome: the mail's protocol
// from its first step, the call, since no attempt before this one held the
// row. It returns the recorded outcome, or nil when none was recorded
// (logged): the workflow's activity named by then (SendReceipt,
// SendRefundReceipt) claims the row through the ledger, which fences the
// token, and looks the mail up before it sends (a send of this attempt
// may have reached SendGrid).
func (a *Activities) sendHeld(ctx context.Context, m *mailing, then string) *ReceiptResult {
	out, err := effect.Run(ctx, effect.Attempt{Claim: m.token}, a.now(), effect.Kind[string, ReceiptResult](m))
	err = a.boundary(ctx, m.kind, "send "+m.what, err)
	a.countReceipt(m.kind, out, err)
	if err != nil {
		logger(ctx).Warn(m.what+" not sent with its effect: "+then+" sends it", "order_id", m.orderID, "key", m.key, "error", err)
		return nil
	}
	return &out
}

// takesIntakeClaim reports whether a local attempt may take c, the claim
// the intake took with the message, as its own: there is one, and it is
// still inside the key window (past it, the attempt claims through the
// ledger and looks the effect up first).
func (a *Activities) takesIntakeClaim(c *message.Claim) bool {
	return c != nil && c.Token > 0 && !(effect.Attempt{Claim: c.Token, ClaimedAt: c.At, KeyWindow: a.keyTrust()}).PastWindow(a.now())
}

// claimPayment claims in's payment through the ledger (store.ClaimPayment),
// or takes the intake's claim as its own, without a transaction, when in
// carries one still inside the key window (see ChargeOrder).
func (a *Activities) claimPayment(ctx context.Context, key, wfID string, in ChargeInput) (store.ClaimResult, error) {
	if c := in.Claim; a.takesIntakeClaim(c) {
		return store.ClaimResult{Outcome: store.ClaimOwned, Claim: c.Token, Payment: store.Payment{
			OrderID: in.OrderID, Consumer: in.Consumer, MessageID: in.MessageID, Key: key, State: store.PaymentClaimed,
			Amount: in.Amount, Currency: in.Currency, CreatedAt: c.At,
		}}, nil
	}
	return a.Store.ClaimPayment(ctx, store.PaymentClaim{
		Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID,
		Amount: in.Amount, Currency: in.Currency, Key: key,
		RequestHash: requestHash(in.request()), WorkflowID: wfID,
	})
}

// Call creates the PaymentIntent under the create key unless one is
// recorded, then confirms it under the confirm key. No transaction between
// the two: the record after the confirmation carries the ID (see
// ChargeOrder). A failed confirmation is a *confirmError.
func (c *charging) Call(ctx context.Context) (*payment.Charge, error) {
	in := c.in
	fresh := c.piID == "" // this attempt creates the PaymentIntent
	if fresh {
		created, err := c.a.Payments.Create(ctx, payment.ChargeRequest{
			IdempotencyKey: c.createKey, MessageID: in.MessageID, OrderID: in.OrderID,
			Amount: in.Amount, Currency: in.Currency, PaymentMethod: in.PaymentMethod,
		})
		if err != nil {
			return nil, err
		}
		failpoint.Hit(failpoint.PaymentAfterCreate)
		c.piID = created.PaymentIntentID
	}
	ch, err := c.a.Payments.Confirm(ctx, c.piID, c.key)
	if err != nil {
		if _, deferred := effect.NotSent(err); deferred && fresh {
			// The confirm was not sent: the next attempt confirms this
			// PaymentIntent instead of creating it again.
			if rerr := c.recordID(ctx, c.piID); rerr != nil {
				return nil, rerr
			}
		}
		return nil, &confirmError{piID: c.piID, err: err}
	}
	failpoint.Hit(failpoint.PaymentAfterCharge)
	return ch, nil
}

// confirmError is a failed confirmation of PaymentIntent piID: what the
// PaymentIntent itself says decides (confirmFailed).
type confirmError struct {
	piID string
	err  error
}

func (e *confirmError) Error() string {
	return "confirm payment intent " + e.piID + ": " + e.err.Error()
}
func (e *confirmError) Unwrap() error { return e.err }

// Lookup reads the PaymentIntent, strongly consistently: retrieved by its
// recorded ID, or, when none is recorded (an earlier claim's create whose
// answer was lost, an ambiguous create), listed over the claim's window.
// Never Search for anything younger than Stripe's Search lag (see
// payment.FindInWindow).
func (c *charging) Lookup(ctx context.Context) (*payment.Charge, error) {
	if c.piID != "" {
		pi, err := c.a.Payments.Get(ctx, c.piID)
		if err != nil {
			return nil, fmt.Errorf("retrieve payment intent of order %d: %w", c.in.OrderID, err)
		}
		return pi, nil
	}
	c.listed = true
	found, err := c.a.Payments.FindInWindow(ctx, c.in.MessageID, c.claimedAt.Add(-reconcile.ClockSkew), c.a.now().Add(reconcile.ClockSkew))
	return stripeFound(found, err, fmt.Sprintf("list payment intents of order %d", c.in.OrderID))
}

// Differs checks a PaymentIntent found by a lookup (see differs).
func (c *charging) Differs(found *payment.Charge) string { return c.differs(found) }

// Classify classifies a failed create or confirm. A confirmation refused
// or answered ambiguously is settled by what the PaymentIntent says
// (Refused → confirmFailed), never by a lookup that would confirm again.
func (c *charging) Classify(err error) effect.Class {
	class := stripeClass(err)
	if _, ok := errors.AsType[*confirmError](err); ok && class != effect.ClassAlert && class != effect.ClassRetry {
		return effect.ClassRefused
	}
	return class
}

// Record records what the confirmation answered, or goes on with a
// PaymentIntent a lookup found (adopt).
func (c *charging) Record(ctx context.Context, ch *payment.Charge, via effect.Via) (ChargeResult, error) {
	if via == effect.ViaLookup {
		logger(ctx).Warn("payment intent of an earlier claim found by lookup", "order_id", c.in.OrderID,
			"payment_intent_id", ch.PaymentIntentID, "status", ch.Status, "listed", c.listed)
		return c.adopt(ctx, ch, c.listed)
	}
	res, err := c.settle(ctx, ch, false)
	if err == nil {
		failpoint.Hit(failpoint.PaymentAfterRecord)
	}
	return res, err
}

// Refused records a refused create as declined (nothing was confirmed, so
// nothing was charged), and settles a failed confirmation by the
// PaymentIntent (confirmFailed).
func (c *charging) Refused(ctx context.Context, cause error) (ChargeResult, error) {
	if ce, ok := errors.AsType[*confirmError](cause); ok {
		return c.confirmFailed(ctx, ce.piID, ce.err)
	}
	return c.a.recordDecline(ctx, c.in, c.key, c.token, "", cause)
}

// Foreign records a PaymentIntent that differs from the request as
// unexpected, for an operator: never confirmed, paid or failed.
func (c *charging) Foreign(ctx context.Context, found *payment.Charge, reason string) (ChargeResult, error) {
	return c.unexpected(ctx, found, reason)
}

// Unfound settles an ambiguous create (Stripe replayed a saved 500 for the
// create key) that the list, strongly consistent, does not show. The ledger
// counts the lists that found nothing, over the tries of the local and the
// regular activity together (a try the rate limit sent back, which listed
// nothing, is not one): after AmbiguousAttempts of them, nothing exists at
// Stripe, so nothing was charged, and the payment is recorded as failed
// with code create_failed. It never creates again on a guess.
func (c *charging) Unfound(ctx context.Context, cause error) (ChargeResult, error) {
	in := c.in
	n, err := c.a.Store.CountUnfound(ctx, c.key, c.token)
	if err != nil {
		return ChargeResult{}, err
	}
	if n < c.a.ambiguousAttempts() {
		return ChargeResult{}, fmt.Errorf("charge order %d: ambiguous create and no payment intent listed yet (%d of %d lists, claim %d): %w",
			in.OrderID, n, c.a.ambiguousAttempts(), c.token, cause)
	}
	logger(ctx).Error("stripe failed to create the payment intent; none exists: recorded as failed", "order_id", in.OrderID, "message_id", in.MessageID)
	return c.a.recordRefusal(ctx, in, c.key, c.token, store.PaymentFailure{
		Code:    CodeCreateFailed,
		Message: "stripe answered the create with a saved 500 and no payment intent exists: nothing was charged",
	})
}

// adopt goes on with a PaymentIntent found by a lookup (a list of the
// claim's window, or a retrieve by the recorded ID): it must be the
// request's (else it is recorded unexpected), its ID is recorded when it is
// not yet (record), and it is recorded for what it is when it was confirmed
// already, or confirmed now when it was not.
func (c charging) adopt(ctx context.Context, pi *payment.Charge, record bool) (ChargeResult, error) {
	if d := c.differs(pi); d != "" {
		return c.unexpected(ctx, pi, d)
	}
	if record {
		if err := c.recordID(ctx, pi.PaymentIntentID); err != nil {
			return ChargeResult{}, err
		}
	}
	if v, _, _ := pi.Verdict(); v != payment.VerdictUnconfirmed {
		return c.settle(ctx, pi, true)
	}
	return c.confirm(ctx, pi.PaymentIntentID)
}

// confirm confirms the recorded PaymentIntent piID under the confirm key and
// records what its status means.
func (c charging) confirm(ctx context.Context, piID string) (ChargeResult, error) {
	ch, err := c.a.Payments.Confirm(ctx, piID, c.key)
	if err == nil {
		failpoint.Hit(failpoint.PaymentAfterCharge)
		res, err := c.settle(ctx, ch, false)
		if err == nil {
			failpoint.Hit(failpoint.PaymentAfterRecord)
		}
		return res, err
	}
	return c.confirmFailed(ctx, piID, err)
}

// charging is one claim's attempt at a payment: the charge kind of the
// effect protocol.
type charging struct {
	a         *Activities
	in        ChargeInput
	key       string
	createKey string
	token     int32
	// piID is the PaymentIntent: recorded, or created by this attempt.
	piID string
	// listed is set once a lookup listed the claim's window: a
	// PaymentIntent found so is recorded before it is confirmed.
	listed bool
	// claimedAt is when the payment was first claimed (payments.created_at):
	// the start of the window a list searches.
	claimedAt time.Time
	// receiptBy is when the charge's record must have begun for the
	// receipt to be claimed with it (ChargeInput.ReceiptBudget); zero: no
	// receipt with the charge.
	receiptBy time.Time
}

// recordID records the ID of a PaymentIntent found by a list under the
// claim, before it is confirmed, so that later attempts retrieve it instead
// of listing again. The first attempt's happy path never calls it: its
// record after the confirmation carries the ID.
func (c charging) recordID(ctx context.Context, piID string) error {
	if err := c.a.Store.RecordPaymentIntentID(ctx, c.in.Consumer, c.in.MessageID, c.key, c.token, piID); err != nil {
		return fenced(fmt.Errorf("record payment intent of order %d: %w", c.in.OrderID, err))
	}
	return nil
}

// differs reports how a PaymentIntent found by a lookup (retrieve, list)
// differs from the request (see payment.Charge.Differs): "" when it is the
// request's payment, else the reason it is recorded unexpected.
func (c charging) differs(ch *payment.Charge) string {
	d := ch.Differs(c.in.Amount, c.in.Currency, c.in.PaymentMethod)
	if d == "" {
		return ""
	}
	return "payment intent " + ch.PaymentIntentID + " found for the message differs from the request: " + d
}

// settle records what the PaymentIntent's status means (see ChargeOrder).
// A PaymentIntent found by a lookup (reconciled) must match the request's
// amount, currency and payment method first: one that differs is recorded
// unexpected, never paid or failed.
func (c charging) settle(ctx context.Context, ch *payment.Charge, reconciled bool) (ChargeResult, error) {
	in := c.in
	if reconciled {
		if d := c.differs(ch); d != "" {
			return c.unexpected(ctx, ch, d)
		}
	}
	verdict, code, decline := ch.Verdict()
	switch verdict {
	case payment.VerdictPaid:
		return c.a.recordCharge(ctx, in, c.key, c.token, ch, reconciled, c.receiptBy)
	case payment.VerdictProcessing:
		already, err := c.a.Store.RecordPaymentProcessing(ctx, store.PaymentOpen{
			Consumer: in.Consumer, MessageID: in.MessageID, Key: c.key, Claim: c.token,
			PaymentIntentID: ch.PaymentIntentID, StripeStatus: ch.Status,
		})
		if err != nil {
			return ChargeResult{}, fenced(fmt.Errorf("record processing payment of order %d: %w", in.OrderID, err))
		}
		if !already {
			logger(ctx).Info("payment processing: waiting for stripe to settle it", "order_id", in.OrderID, "payment_intent_id", ch.PaymentIntentID)
		}
		return ChargeResult{Outcome: PaymentProcessing, PaymentIntentID: ch.PaymentIntentID, Replayed: ch.Replayed, Reconciled: reconciled}, nil
	case payment.VerdictFailed:
		return c.a.recordRefusal(ctx, in, c.key, c.token, store.PaymentFailure{
			Code: code, DeclineCode: decline, PaymentIntentID: ch.PaymentIntentID, StripeStatus: ch.Status,
			Message: "payment intent " + ch.Status,
		})
	case payment.VerdictUnconfirmed, payment.VerdictUnexpected:
	}
	return c.unexpected(ctx, ch, "payment intent is "+ch.Status+" after confirmation")
}

// unexpected records a PaymentIntent in a status nobody asked for and stops
// the payment with a non-retryable ErrTypeUnexpectedState for an operator.
func (c charging) unexpected(ctx context.Context, ch *payment.Charge, reason string) (ChargeResult, error) {
	if _, err := c.a.Store.RecordPaymentUnexpected(ctx, store.PaymentOpen{
		Consumer: c.in.Consumer, MessageID: c.in.MessageID, Key: c.key, Claim: c.token,
		PaymentIntentID: ch.PaymentIntentID, StripeStatus: ch.Status, Reason: reason,
	}); err != nil {
		return ChargeResult{}, fenced(fmt.Errorf("record unexpected payment of order %d: %w", c.in.OrderID, err))
	}
	logger(ctx).Error("payment in an unexpected state: operator action needed", "order_id", c.in.OrderID,
		"message_id", c.in.MessageID, "payment_intent_id", ch.PaymentIntentID, "status", ch.Status)
	return ChargeResult{}, temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("payment of order %d: %s", c.in.OrderID, reason), ErrTypeUnexpectedState, nil)
}

// confirmFailed handles a failed confirmation of PaymentIntent piID.
func (c charging) confirmFailed(ctx context.Context, piID string, err error) (ChargeResult, error) {
	in := c.in
	if stripeClass(err) == effect.ClassAlert {
		return ChargeResult{}, &effect.Error{Class: effect.ClassAlert, Err: err}
	}
	switch class := payment.Classify(err); class {
	case payment.ClassDeclined:
		return c.a.recordDecline(ctx, in, c.key, c.token, piID, err)
	case payment.ClassInvalid, payment.ClassAmbiguous:
		// A confirm refused as invalid (the PaymentIntent may be settled
		// already, say by a confirm whose answer was lost past the key
		// window) or answered with a replayed 500: what happened is in the
		// PaymentIntent itself.
		ch, gerr := c.a.Payments.Get(ctx, piID)
		if gerr != nil {
			return ChargeResult{}, fmt.Errorf("retrieve payment intent of order %d after %s confirmation: %w", in.OrderID, class, errors.Join(err, gerr))
		}
		if v, _, _ := ch.Verdict(); v != payment.VerdictUnconfirmed {
			logger(ctx).Warn("confirmation answer settled by retrieve", "order_id", in.OrderID, "payment_intent_id", piID, "class", string(class), "status", ch.Status)
			return c.settle(ctx, ch, true)
		}
		if class == payment.ClassInvalid {
			return c.a.recordDecline(ctx, in, c.key, c.token, piID, err)
		}
		// The confirmation failed inside Stripe and its key replays that
		// failure: the PaymentIntent was never confirmed, and only an
		// operator can decide to try again.
		return c.unexpected(ctx, ch, "confirmation answered a saved 500 and the payment intent is still "+ch.Status)
	case payment.ClassIdempotencyMismatch:
		return c.legacyCharge(ctx, piID, err)
	default:
		// In flight (409), rate limited (429), transport errors, 5xx:
		// retry with backoff under the same keys: the retry's create
		// replays this PaymentIntent (past the key window, the list of the
		// claim's window finds it).
		return ChargeResult{}, fmt.Errorf("confirm payment of order %d: %w", in.OrderID, err)
	}
}

// legacyCharge handles a confirm key that Stripe saw with other
// parameters. Before create then confirm, "payment:<message id>" keyed
// one request that created and confirmed the PaymentIntent, so a payment
// claimed by an older worker and retried by this one meets its own key
// here: that PaymentIntent, found by a list of the claim's window, is the
// payment. Anything else is a bug, and final.
func (c charging) legacyCharge(ctx context.Context, piID string, cause error) (ChargeResult, error) {
	in := c.in
	found, err := c.a.Payments.FindInWindow(ctx, in.MessageID, c.claimedAt.Add(-reconcile.ClockSkew), c.a.now().Add(reconcile.ClockSkew))
	switch {
	case err == nil && found.PaymentIntentID != piID:
		if v, _, _ := found.Verdict(); v != payment.VerdictUnconfirmed {
			logger(ctx).Warn("payment made under the single-request key scheme found by list", "order_id", in.OrderID, "payment_intent_id", found.PaymentIntentID, "status", found.Status)
			return c.settle(ctx, found, true)
		}
	case err != nil && !errors.Is(err, payment.ErrNotFound):
		return ChargeResult{}, fmt.Errorf("list payment intents of order %d after an idempotency mismatch: %w", in.OrderID, err)
	}
	return ChargeResult{}, temporal.NewNonRetryableApplicationError("stripe refused the key: same key, different parameters", ErrTypeIdempotencyMismatch, cause)
}

// recordedCharge returns the outcome already in Postgres, without a call.
func recordedCharge(p store.Payment) (ChargeResult, error) {
	r := ChargeResult{PaymentIntentID: p.PaymentIntentID, Recorded: true}
	switch p.State {
	case store.PaymentSucceeded:
		r.Outcome = PaymentPaid
	case store.PaymentFailed:
		r.Outcome = PaymentFailed
		r.FailureCode, r.DeclineCode = p.FailureCode, p.DeclineCode
	case store.PaymentProcessing:
		r.Outcome = PaymentProcessing
	case store.PaymentUnexpected:
		return ChargeResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("payment of order %d is recorded as unexpected (stripe status %s): operator action needed", p.OrderID, p.StripeStatus), ErrTypeUnexpectedState, nil)
	default:
		return ChargeResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("payment of order %d is recorded as %s: operator action needed", p.OrderID, p.State), ErrTypePaymentUnknown, nil)
	}
	return r, nil
}

// recordCharge records the payment paid and, when in names the receipt's
// address and the record begins before receiptBy, claims the receipt in the
// same statement (store.RecordPaidClaimingReceipt): a claim this attempt
// alone holds, in ChargeResult.held, when its record is the one that
// settled the payment.
func (a *Activities) recordCharge(ctx context.Context, in ChargeInput, key string, token int32, ch *payment.Charge, reconciled bool, receiptBy time.Time) (ChargeResult, error) {
	r := store.PaymentSuccess{
		Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID, Key: key, Claim: token,
		PaymentIntentID: ch.PaymentIntentID, ChargeID: ch.ChargeID, Amount: in.Amount, Currency: in.Currency,
		Reconciled: reconciled, WorkflowID: in.marks(),
	}
	var held *heldReceipt
	// The real clock, as the deadline is (a.now may be a test's).
	if in.ReceiptTo != "" && time.Now().Before(receiptBy) {
		mailKey, err := identity.Key(identity.EffectEmail, in.MessageID)
		if err != nil {
			return ChargeResult{}, temporal.NewNonRetryableApplicationError("bad message id", ErrTypeInvalidInput, err)
		}
		held = &heldReceipt{in: in.receipt(ch.PaymentIntentID), key: mailKey}
		r.Receipt = &store.EmailClaim{Key: mailKey, RequestHash: requestHash(receiptMail(mailKey, held.in)), Policy: a.emailPolicy()}
	}
	_, receipt, err := a.Store.RecordPaidClaimingReceipt(ctx, r)
	if err != nil {
		// The charge exists at Stripe; a retry replays it under the key and
		// records it then.
		return ChargeResult{}, fenced(fmt.Errorf("record payment of order %d: %w", in.OrderID, err))
	}
	res := ChargeResult{Outcome: PaymentPaid, PaymentIntentID: ch.PaymentIntentID, Replayed: ch.Replayed, Reconciled: reconciled}
	if receipt > 0 {
		held.token = receipt
		res.held = held
	}
	return res, nil
}

func (a *Activities) recordDecline(ctx context.Context, in ChargeInput, key string, token int32, piID string, cause error) (ChargeResult, error) {
	var (
		pe *payment.Error
		f  = store.PaymentFailure{PaymentIntentID: piID}
	)
	if errors.As(cause, &pe) {
		f.Code, f.DeclineCode, f.Message = pe.Code, pe.DeclineCode, pe.Message
	}
	if f.Code == "" {
		f.Code = string(payment.Classify(cause))
	}
	return a.recordRefusal(ctx, in, key, token, f)
}

// recordRefusal records a refused payment as the order's final outcome.
func (a *Activities) recordRefusal(ctx context.Context, in ChargeInput, key string, token int32, f store.PaymentFailure) (ChargeResult, error) {
	f.Consumer, f.MessageID, f.OrderID, f.Key, f.Claim, f.WorkflowID = in.Consumer, in.MessageID, in.OrderID, key, token, in.marks()
	if _, err := a.Store.RecordPaymentFailed(ctx, f); err != nil {
		return ChargeResult{}, fenced(fmt.Errorf("record declined payment of order %d: %w", in.OrderID, err))
	}
	logger(ctx).Info("payment refused", "order_id", in.OrderID, "code", f.Code, "decline_code", f.DeclineCode)
	return ChargeResult{Outcome: PaymentFailed, FailureCode: f.Code, DeclineCode: f.DeclineCode}, nil
}

// CodeCreateFailed is the failure code of a payment whose PaymentIntent
// Stripe failed to create (a replayed 500, and none listed): nothing was
// charged.
const CodeCreateFailed = "create_failed"

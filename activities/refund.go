package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/internal/adapter/email"
	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/effect"
	"github.com/effectively/effectively/internal/leaf/failpoint"
	"github.com/effectively/effectively/internal/leaf/identity"
)

// RefundInput is what RefundOrder needs: everything comes from the message;
// the PaymentIntent and the currency come from the recorded payment.
type RefundInput struct {
	Consumer  string `json:"consumer"`
	MessageID string `json:"message_id"`
	OrderID   int64  `json:"order_id"`
	Amount    int64  `json:"amount"`
	Reason    string `json:"reason"`
	// AwaitPayment: an order with no payment yet fails with
	// ErrTypePaymentMissing, recording nothing, instead of ending
	// order_not_paid (OrderRefund sets it until its wait is over). Not part
	// of the request's hash.
	AwaitPayment bool `json:"await_payment,omitempty"`
	// ReceiptBudget is the time the refund receipt's send keeps at the end
	// of a local attempt, as ChargeInput.ReceiptBudget: a local attempt
	// whose record settles the refund claims the receipt in that record's
	// statement and sends it, when the record begins at least that long
	// before the attempt's deadline. Zero (the regular activity, an older
	// workflow's input): the workflow's SendRefundReceipt sends it. Not part
	// of the request's hash.
	ReceiptBudget time.Duration `json:"receipt_budget,omitempty"`
	// Claim, when set, is the refund's claim the intake took in the
	// transaction that recorded the message (IntakeRefundClaim), with the
	// PaymentIntent and currency its refunds row records. A local attempt
	// inside the key window takes it as its own instead of claiming; the
	// regular activity ignores it and claims (see RefundOrder). Not part of
	// the request's hash.
	Claim *message.Claim `json:"claim,omitempty"`
}

// IntakeRefundClaim is the claim of in's refund that the intake takes in
// the transaction that records the message (store.InboxEntry.Refund): the
// key and request hash RefundOrder's own claim would record.
func IntakeRefundClaim(in RefundInput) (store.RefundClaim, error) {
	key, err := identity.Key(identity.EffectRefund, in.MessageID)
	if err != nil {
		return store.RefundClaim{}, err
	}
	return store.RefundClaim{Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID,
		Amount: in.Amount, Reason: in.Reason, Key: key, RequestHash: requestHash(in.request())}, nil
}

// RefundOutcome is the outcome of RefundOrder, with the values the
// processed row records (store.Outcome).
type RefundOutcome string

// Refund outcomes returned by RefundOrder.
const (
	// RefundRefunded: Stripe created the refund (once, under the key), and
	// it succeeded.
	RefundRefunded RefundOutcome = "refunded"
	// RefundPending: Stripe created the refund but has not moved the money
	// yet (pending, requires_action); its amount stays reserved, and no
	// receipt is sent until CheckRefund finds it succeeded.
	RefundPending RefundOutcome = "refund_pending"
	// RefundFailed: Stripe refused the refund; its amount is free again.
	RefundFailed RefundOutcome = "refund_failed"
	// RefundExceedsPayment: more than what remains of the payment; Stripe
	// was not called.
	RefundExceedsPayment RefundOutcome = "refund_exceeds_payment"
	// RefundOrderNotPaid: the order was never paid; Stripe was not called.
	RefundOrderNotPaid RefundOutcome = "order_not_paid"
)

// RefundResult is the recorded outcome of RefundOrder.
type RefundResult struct {
	Outcome         RefundOutcome `json:"outcome"`
	RefundID        string        `json:"refund_id,omitempty"`
	PaymentIntentID string        `json:"payment_intent_id,omitempty"`
	Currency        string        `json:"currency,omitempty"`
	// Paid and Refunded are the payment's amount and what its other
	// refunds already hold, for RefundExceedsPayment.
	Paid     int64 `json:"paid,omitempty"`
	Refunded int64 `json:"refunded,omitempty"`
	// FailureCode explains a RefundFailed.
	FailureCode string `json:"failure_code,omitempty"`
	// Status is the Refund's status at Stripe, when known.
	Status     string `json:"status,omitempty"`
	Replayed   bool   `json:"replayed,omitempty"`
	Recorded   bool   `json:"recorded,omitempty"`
	Reconciled bool   `json:"reconciled,omitempty"`
	// Receipt is the refund receipt this attempt sent under the claim its
	// record took, as recorded; nil when it recorded none (the workflow's
	// SendRefundReceipt then claims the receipt and sends it).
	Receipt *ReceiptResult `json:"receipt,omitempty"`

	// held is the receipt claim the record took, for this attempt alone:
	// never serialized, so no other attempt, and no replay, can hold it.
	held *heldReceipt
}

// Activity type names of the refund and its receipt.
const (
	RefundOrderName       = "RefundOrder"
	SendRefundReceiptName = "SendRefundReceipt"
)

func init() {
	register(RefundOrderName, func(a *Activities) any { return a.RefundOrder })
	register(SendRefundReceiptName, func(a *Activities) any { return a.SendRefundReceipt })
}

// RefundOrder refunds part of an order's payment exactly once, under the
// effect protocol (internal/effect).
//
// Safe to retry: the refund is decided in Postgres first, in one
// transaction that locks the payment (a refund beyond what remains, or of an
// order never paid, is recorded as such and Stripe is not called); Stripe is
// called with the key "refund:<message id>" against the recorded
// PaymentIntent (a repeat inside Stripe's key window is replayed, never
// refunded again); the outcome commits with the message's processed row in
// one statement. A retry past the key window (KeyTrust after the claim: a
// retry a day after the claim) lists the PaymentIntent's refunds first, which is
// strongly consistent and scoped to the object, and adopts the one carrying
// the message's ID and key namespace; only when there is none does it
// refund. An ambiguous answer is settled by the same list. A refund found
// with another amount or currency is never adopted: the attempt stops with
// a non-retryable ErrTypeUnexpectedState and the refund stays claimed (its
// amount reserved) for an operator. A 401 or 403 is retried and alerts.
//
// A local attempt (RefundOrderLocally) whose input keeps
// in.ReceiptBudget for the receipt claims the refund receipt in the
// refund's record and sends it under that claim, as a charge sends its
// order's (sendHeldRefundReceipt); its refund runs on a deadline that much
// earlier than the attempt's. The regular activity leaves the receipt to
// the workflow's SendRefundReceipt.
//
// A local attempt whose input carries the intake's claim (in.Claim, claim
// 1, taken in the transaction that recorded the message, which reserved
// the amount; the workflow passes it from its first task only) takes it as
// its own without a transaction of its own, while the claim is inside the
// key window, as a charge takes the payment's (ChargeOrder): an attempt run
// again with the same token sends Stripe the same request under the same
// key, which replays, and its record, a compare-and-set on the token and
// the row's open state, finds the first outcome recorded. The regular
// activity, and a local attempt past the window, claim through the ledger,
// which finds the intake's refunds row and counts the token up.
func (a *Activities) RefundOrder(ctx context.Context, in RefundInput) (RefundResult, error) {
	// Only a local attempt takes the intake's claim, or sends the receipt
	// (see RefundOrderLocally).
	in.ReceiptBudget, in.Claim = 0, nil
	return a.refund(ctx, in)
}

// refund is RefundOrder's attempt, with the receipt when in keeps time
// for it.
func (a *Activities) refund(ctx context.Context, in RefundInput) (RefundResult, error) {
	// Like a charge: a worker stop lets the claim, the refund and its record
	// finish, and a regular attempt heartbeats (refundOptions set a
	// HeartbeatTimeout).
	return attempt(ctx, a, identity.EffectRefund, in.Consumer, in.MessageID, a.countRefund, func(ctx context.Context, key string) (RefundResult, error) {
		return a.refundOrder(ctx, key, in)
	})
}

// request is the refund request as hashed for its ledger row: the same
// whether or not the attempt waits for the payment, keeps time for the
// receipt or carries the intake's claim.
func (in RefundInput) request() RefundInput {
	in.AwaitPayment, in.ReceiptBudget, in.Claim = false, 0, nil
	return in
}

// refundOrder is RefundOrder's attempt under key.
func (a *Activities) refundOrder(ctx context.Context, key string, in RefundInput) (RefundResult, error) {
	lg := logger(ctx)
	claim, err := a.claimRefund(ctx, key, in)
	if err != nil {
		return RefundResult{}, fenced(fmt.Errorf("claim refund of order %d: %w", in.OrderID, err))
	}
	switch claim.Decision {
	case store.RefundOrderNotPaid:
		lg.Info("refund refused: order not paid", "order_id", in.OrderID, "payment_state", claim.PaymentState)
		return RefundResult{Outcome: RefundOrderNotPaid}, nil
	case store.RefundExceedsPayment:
		lg.Info("refund refused: exceeds what remains of the payment", "order_id", in.OrderID,
			"amount", in.Amount, "paid", claim.Paid, "refunded", claim.Refunded)
		return RefundResult{Outcome: RefundExceedsPayment, Paid: claim.Paid, Refunded: claim.Refunded}, nil
	case store.RefundPaymentMissing:
		return RefundResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("order %d has no payment yet: the refund waits for it", in.OrderID), ErrTypePaymentMissing, nil)
	case store.RefundPaymentPending:
		return RefundResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("payment of order %d is %s: the refund waits for its outcome", in.OrderID, claim.PaymentState), ErrTypePaymentPending, nil)
	case store.RefundDone:
		return recordedRefund(claim.Refund)
	case store.RefundOwned:
	}
	r := claim.Refund
	k := &refunding{a: a, in: in, key: key, token: claim.Claim, r: r, req: payment.RefundRequest{
		IdempotencyKey: key, MessageID: in.MessageID, OrderID: in.OrderID,
		PaymentIntentID: r.PaymentIntentID, Amount: in.Amount, Reason: in.Reason,
	}}
	// The receipt keeps the end of the attempt, as a charge's does.
	cctx, receiptBy, cancel := receiptDeadline(ctx, in.ReceiptBudget)
	defer cancel()
	// The address came with the claim (none when pruned: no receipt with
	// the refund), so that nothing but the record follows Stripe's answer.
	k.receiptBy, k.receiptTo = receiptBy, claim.ReceiptTo
	at := effect.Attempt{Claim: claim.Claim, ClaimedAt: r.CreatedAt, KeyWindow: a.keyTrust()}
	out, err := effect.Run(cctx, at, a.now(), effect.Kind[*payment.Refund, RefundResult](k))
	if err != nil {
		return out, a.boundary(ctx, metrics.EffectRefund, fmt.Sprintf("refund order %d", in.OrderID), err)
	}
	if out.held != nil {
		out.Receipt, out.held = a.sendHeldRefundReceipt(ctx, *out.held), nil
	}
	return out, nil
}

// claimRefund claims in's refund through the ledger (store.ClaimRefund),
// or takes the intake's claim as its own, without a transaction, when in
// carries one still inside the key window (see RefundOrder). The receipt's
// address, which a ledger claim reads with its locks, is then read on its
// own when the attempt keeps time for the receipt: it is read from the
// paying message's inbox row, which never changes, and no customer data
// travels through Temporal for a refund.
func (a *Activities) claimRefund(ctx context.Context, key string, in RefundInput) (store.RefundClaimResult, error) {
	if c := in.Claim; a.takesIntakeClaim(c) && c.PaymentIntentID != "" {
		res := store.RefundClaimResult{Decision: store.RefundOwned, Claim: c.Token, PaymentState: store.PaymentSucceeded, Refund: store.Refund{
			Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID, Key: key, State: store.RefundClaimed,
			Amount: in.Amount, Currency: c.Currency, Reason: in.Reason, PaymentIntentID: c.PaymentIntentID, CreatedAt: c.At, UpdatedAt: c.At,
		}}
		if in.ReceiptBudget > 0 {
			to, err := a.Store.ReceiptAddress(ctx, in.OrderID)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return store.RefundClaimResult{}, err
			}
			res.ReceiptTo = to // none once pruned: no receipt with the refund
		}
		return res, nil
	}
	return a.Store.ClaimRefund(ctx, store.RefundClaim{
		Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID, Amount: in.Amount,
		Reason: in.Reason, Key: key, RequestHash: requestHash(in.request()), AwaitPayment: in.AwaitPayment,
		WantAddress: in.ReceiptBudget > 0,
	})
}

// sendHeldRefundReceipt sends the refund receipt under the claim the
// refund's record took (h), as sendHeldReceipt sends an order's (sendHeld).
func (a *Activities) sendHeldRefundReceipt(ctx context.Context, h heldReceipt) *ReceiptResult {
	return a.sendHeld(ctx, &mailing{a: a, kind: metrics.EffectRefundReceipt, what: fmt.Sprintf("refund receipt of order %d", h.refund.OrderID),
		orderID: h.refund.OrderID, key: h.key, token: h.token, mail: refundMail(h.key, h.to, h.refund)}, "SendRefundReceipt")
}

// refunding is one claim's attempt at a refund: the refund kind of the
// effect protocol.
type refunding struct {
	a     *Activities
	in    RefundInput
	key   string
	token int32
	r     store.Refund
	req   payment.RefundRequest
	// receiptBy is when the refund's record must have begun for the
	// receipt to be claimed with it (RefundInput.ReceiptBudget), and
	// receiptTo the order's receipt address; zero or empty: no receipt
	// with the refund.
	receiptBy time.Time
	receiptTo string
}

// Call refunds under the key. A replayed answer is Stripe's first one, as
// it was then: the Refund is read again (strongly consistent), so that a
// refund that has failed or settled since is recorded as it is now.
func (k *refunding) Call(ctx context.Context) (*payment.Refund, error) {
	rf, err := k.a.Payments.Refund(ctx, k.req)
	if err == nil {
		failpoint.Hit(failpoint.RefundAfterRefund)
	}
	if err == nil && rf.Replayed && rf.ID != "" {
		if now, rerr := k.a.Payments.RetrieveRefund(ctx, rf.ID); rerr == nil && now.ID == rf.ID {
			now.Replayed = true
			return now, nil
		}
		// Unread: the replay stands; charge.refund.updated corrects it.
	}
	return rf, err
}

// Lookup lists the PaymentIntent's refunds (strongly consistent, scoped to
// the object) for the one carrying the message's ID and key namespace.
func (k *refunding) Lookup(ctx context.Context) (*payment.Refund, error) {
	found, err := k.a.Payments.FindRefund(ctx, k.r.PaymentIntentID, k.in.MessageID)
	return stripeFound(found, err, fmt.Sprintf("list refunds of order %d", k.in.OrderID))
}

// Differs checks a listed refund against the request: PaymentIntent,
// amount and the payment's currency.
func (k *refunding) Differs(found *payment.Refund) string {
	return found.Differs(k.req, k.r.Currency)
}

// Classify classifies a failed refund (stripeClass).
func (k *refunding) Classify(err error) effect.Class { return stripeClass(err) }

// Record records the refund Stripe made (or, via a lookup, had made).
func (k *refunding) Record(ctx context.Context, rf *payment.Refund, via effect.Via) (RefundResult, error) {
	if via == effect.ViaLookup {
		logger(ctx).Warn("refund of an earlier attempt found by listing the payment intent's refunds", "order_id", k.in.OrderID, "refund_id", rf.ID)
	}
	res, err := k.a.recordRefund(ctx, k.in, k.key, k.token, k.r, rf, via == effect.ViaLookup, k.receiptBy, k.receiptTo)
	if err == nil && res.Outcome == RefundRefunded {
		failpoint.Hit(failpoint.RefundAfterRecord)
	}
	return res, err
}

// Refused records a refund Stripe refused; its amount is freed.
func (k *refunding) Refused(ctx context.Context, cause error) (RefundResult, error) {
	code := ""
	if pe, ok := errors.AsType[*payment.Error](cause); ok {
		code = pe.Code
	}
	return k.a.recordRefundRefused(ctx, k.in, k.key, k.token, k.r, code, cause.Error())
}

// Foreign stops on a refund naming the message with other terms: money
// moved that this request did not ask for, so nothing is recorded (the
// amount stays reserved) and an operator decides.
func (k *refunding) Foreign(ctx context.Context, found *payment.Refund, reason string) (RefundResult, error) {
	logger(ctx).Error("refund found for the message differs from the request: operator action needed",
		"order_id", k.in.OrderID, "message_id", k.in.MessageID, "refund_id", found.ID, "reason", reason)
	return RefundResult{}, temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("refund of order %d: refund %s found for the message differs from the request: %s", k.in.OrderID, found.ID, reason),
		ErrTypeUnexpectedState, nil)
}

// Unfound settles an ambiguous answer with no refund listed: the list is
// strongly consistent, so none exists, and the key only replays the error.
// The amount is freed for another message.
func (k *refunding) Unfound(ctx context.Context, cause error) (RefundResult, error) {
	return k.a.recordRefundRefused(ctx, k.in, k.key, k.token, k.r, "ambiguous_not_created", cause.Error())
}

// recordedRefund returns the outcome already in Postgres, without a call.
func recordedRefund(r store.Refund) (RefundResult, error) {
	res := RefundResult{RefundID: r.RefundID, PaymentIntentID: r.PaymentIntentID, Currency: r.Currency, Status: r.RefundStatus, Recorded: true}
	switch r.State {
	case store.RefundSucceeded:
		res.Outcome = RefundRefunded
	case store.RefundPending:
		res.Outcome = RefundPending
	case store.RefundFailed:
		res.Outcome, res.FailureCode = RefundFailed, r.FailureCode
	case store.RefundClaimed:
		// ClaimRefund reports a claimed refund as done only when its ledger
		// row is terminal without the refund row following: a bug.
		return RefundResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("refund of order %d is claimed but its ledger row is settled", r.OrderID), ErrTypeInvalidInput, nil)
	}
	return res, nil
}

// recordRefund records the refund Stripe made and, when the record begins
// before receiptBy and the order's receipt address (to) is known, claims
// the refund receipt in the same statement (store.RecordRefundClaimingReceipt):
// a claim this attempt alone holds, in RefundResult.held, when its record is
// the one that settled the refund.
func (a *Activities) recordRefund(ctx context.Context, in RefundInput, key string, token int32, r store.Refund, rf *payment.Refund, reconciled bool, receiptBy time.Time, to string) (RefundResult, error) {
	if rf.Failed() {
		return a.recordRefundRefused(ctx, in, key, token, r, "refund_"+rf.Status, "stripe reports the refund "+rf.Status)
	}
	rec := store.RefundSuccess{
		Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID, Key: key, Claim: token,
		RefundID: rf.ID, Status: rf.Status,
	}
	res := RefundResult{
		Outcome: RefundRefunded, RefundID: rf.ID, PaymentIntentID: r.PaymentIntentID, Currency: r.Currency,
		Status: rf.Status, Replayed: rf.Replayed, Reconciled: reconciled,
	}
	var held *heldReceipt
	if rf.Pending() {
		// No money moved yet: recorded pending, and no receipt until it
		// succeeds (CheckRefund).
		res.Outcome = RefundPending
	} else {
		held = refundReceiptToHold(in, res, receiptBy, to)
	}
	if held != nil {
		rec.Receipt = &store.EmailClaim{Key: held.key, RequestHash: requestHash(refundMail(held.key, held.to, held.refund)), Policy: a.emailPolicy()}
	}
	_, receipt, err := a.Store.RecordRefundClaimingReceipt(ctx, rec)
	if err != nil {
		// The refund exists at Stripe; a retry replays it under the key and
		// records it then.
		return RefundResult{}, fenced(fmt.Errorf("record refund of order %d: %w", in.OrderID, err))
	}
	if receipt > 0 {
		held.token = receipt
		res.held = held
	}
	return res, nil
}

// refundReceiptToHold is the refund receipt to address to that a record
// of res may claim: nil when the record begins at or past receiptBy (zero:
// no receipt with the refund) or no address is known; the workflow's
// SendRefundReceipt then has its own attempt for it, and records an address
// that is gone.
func refundReceiptToHold(in RefundInput, res RefundResult, receiptBy time.Time, to string) *heldReceipt {
	// The real clock, as the deadline is (a.now may be a test's).
	if to == "" || !time.Now().Before(receiptBy) {
		return nil
	}
	key, err := identity.Key(identity.EffectRefundEmail, in.MessageID)
	if err != nil {
		return nil
	}
	return &heldReceipt{key: key, to: to, refund: RefundReceiptInput{
		Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID,
		Amount: in.Amount, Currency: res.Currency, RefundID: res.RefundID,
	}}
}

func (a *Activities) recordRefundRefused(ctx context.Context, in RefundInput, key string, token int32, r store.Refund, code, msg string) (RefundResult, error) {
	if _, err := a.Store.RecordRefundFailed(ctx, store.RefundFailure{
		Consumer: in.Consumer, MessageID: in.MessageID, OrderID: in.OrderID, Key: key, Claim: token, Code: code, Message: msg,
	}); err != nil {
		return RefundResult{}, fenced(fmt.Errorf("record refused refund of order %d: %w", in.OrderID, err))
	}
	logger(ctx).Warn("refund refused by stripe", "order_id", in.OrderID, "code", code)
	return RefundResult{Outcome: RefundFailed, FailureCode: code, PaymentIntentID: r.PaymentIntentID, Currency: r.Currency}, nil
}

// RefundReceiptInput is what SendRefundReceipt needs. The address is not in
// it: the activity reads it from Postgres, so no customer data travels
// through Temporal for a refund.
type RefundReceiptInput struct {
	Consumer  string `json:"consumer"`
	MessageID string `json:"message_id"`
	OrderID   int64  `json:"order_id"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
	RefundID  string `json:"refund_id"`
	// Sent is the outcome RefundOrder's local attempt recorded for this
	// receipt (RefundResult.Receipt): SendRefundReceipt returns it without
	// a send or a transaction. Nil: it claims the receipt itself.
	Sent *ReceiptResult `json:"sent,omitempty"`
}

// SendRefundReceipt tells the customer about a refund, under the effect
// protocol and the worker's email policy, like SendReceipt (the resend
// grace included), with its own ledger key "refundemail:<message id>": an
// order.placed and an order.refund_requested may share a message ID, and
// their receipts must not share a key. A refund receipt claimed by an
// earlier release under "email:<message id>" keeps that row (see
// store.EmailClaim.LegacyKey). The address is the one the order's receipt
// went to; when it is no longer kept (the order's message was pruned), the
// receipt is recorded as failed. A receipt the refund already sent and
// recorded (in.Sent) is returned as it is: the workflow still schedules
// SendRefundReceipt, so that its histories keep the shape older workers
// replay.
func (a *Activities) SendRefundReceipt(ctx context.Context, in RefundReceiptInput) (ReceiptResult, error) {
	if in.Sent != nil {
		return *in.Sent, nil
	}
	count := func(r ReceiptResult, err error) { a.countReceipt(metrics.EffectRefundReceipt, r, err) }
	return attempt(ctx, a, identity.EffectRefundEmail, in.Consumer, in.MessageID, count, func(ctx context.Context, key string) (ReceiptResult, error) {
		return a.sendRefundReceipt(ctx, key, in)
	})
}

// sendRefundReceipt is SendRefundReceipt's attempt under key. It sends
// nothing for a refund whose row says Stripe has not moved the money
// (pending) or took it back (failed): a workflow that reaches the receipt
// with a pending refund (one an earlier release's workflow code handled)
// fails there for an operator instead.
func (a *Activities) sendRefundReceipt(ctx context.Context, key string, in RefundReceiptInput) (ReceiptResult, error) {
	switch rf, err := a.Store.RefundOf(ctx, in.Consumer, in.MessageID); {
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return ReceiptResult{}, fmt.Errorf("refund receipt of order %d: %w", in.OrderID, err)
	case err == nil && (rf.State == store.RefundPending || rf.State == store.RefundFailed):
		return ReceiptResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("refund receipt of order %d: the refund %s is %s at Stripe: no receipt", in.OrderID, rf.RefundID, rf.State), ErrTypeRefundNotSucceeded, nil)
	}
	to, err := a.Store.ReceiptAddress(ctx, in.OrderID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return ReceiptResult{}, fmt.Errorf("refund receipt of order %d: %w", in.OrderID, err)
	}
	unsendable := ""
	if to == "" {
		unsendable = "no address on record: the order's message was pruned"
	}
	// OrderID 0: a refund receipt leaves the order's receipt_status alone.
	m := &mailing{a: a, kind: metrics.EffectRefundReceipt, what: fmt.Sprintf("refund receipt of order %d", in.OrderID), orderID: in.OrderID}
	return m.send(ctx, store.EmailClaim{
		Consumer: in.Consumer, MessageID: in.MessageID, Key: key,
		LegacyKey: identity.MustKey(identity.EffectEmail, in.MessageID),
	}, func(key string) email.Mail { return refundMail(key, to, in) }, unsendable)
}

// recordedReceipt is a settled email ledger row as a ReceiptResult.
func recordedReceipt(e store.Effect) ReceiptResult {
	r := ReceiptResult{Outcome: ReceiptSent, ProviderMessageID: e.ProviderRef, Recorded: true}
	switch e.State {
	case store.StateFailed:
		r.Outcome, r.Error = ReceiptFailed, e.Error
	case store.StateUnknown:
		r.Outcome, r.Error = ReceiptUnknown, e.Error
	default: // succeeded: only terminal rows are done
	}
	return r
}

// refundMail builds the refund receipt from the input and the address
// alone, so its hash fingerprints the request in the ledger.
func refundMail(key, to string, in RefundReceiptInput) email.Mail {
	return email.Mail{
		IdempotencyKey: key,
		MessageID:      in.MessageID,
		To:             to,
		Subject:        fmt.Sprintf("Your refund for order %d", in.OrderID),
		Text: fmt.Sprintf("We refunded %s of your order %d (refund %s). It reaches your account within a few days.\n",
			formatAmount(in.Amount, in.Currency), in.OrderID, in.RefundID),
	}
}

package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"
	"go.temporal.io/api/serviceerror"

	"github.com/effectively/effectively/internal/adapter/payment"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/leaf/identity"
	"github.com/effectively/effectively/workflows"
)

// Stripe event types that settle the payment ledger, and the ledger state
// each reports.
var paymentEventTargets = map[string]store.PaymentState{
	"payment_intent.succeeded":      store.PaymentSucceeded,
	"payment_intent.processing":     store.PaymentProcessing,
	"payment_intent.payment_failed": store.PaymentFailed,
	"payment_intent.canceled":       store.PaymentFailed,
}

// eventRefunded is recorded in stripe_refunds.
const eventRefunded = "charge.refunded"

// refundUpdateEvents carry a Refund whose status moved: charge.refund.updated
// (every API version), refund.updated and refund.failed (newer ones).
var refundUpdateEvents = map[string]bool{"charge.refund.updated": true, "refund.updated": true, "refund.failed": true}

// stripeRefund is the part of a Refund a refund update records.
type stripeRefund struct {
	ID            string            `json:"id"`
	Status        string            `json:"status"`
	FailureReason string            `json:"failure_reason"`
	Metadata      map[string]string `json:"metadata"`
}

// stripeIntent is the part of a PaymentIntent an event settles with.
type stripeIntent struct {
	ID                 string            `json:"id"`
	Status             string            `json:"status"`
	Amount             int64             `json:"amount"`
	Currency           string            `json:"currency"`
	LatestCharge       json.RawMessage   `json:"latest_charge"`  // an ID, or the expanded charge
	PaymentMethod      json.RawMessage   `json:"payment_method"` // an ID, or the expanded payment method
	Metadata           map[string]string `json:"metadata"`
	CancellationReason string            `json:"cancellation_reason"`
	LastPaymentError   *struct {
		Code        string `json:"code"`
		DeclineCode string `json:"decline_code"`
		Message     string `json:"message"`
	} `json:"last_payment_error"`
}

// stripeCharge is the part of a Charge a charge.refunded event records.
type stripeCharge struct {
	ID             string            `json:"id"`
	PaymentIntent  string            `json:"payment_intent"`
	AmountRefunded int64             `json:"amount_refunded"`
	Currency       string            `json:"currency"`
	Refunded       bool              `json:"refunded"`
	Metadata       map[string]string `json:"metadata"`
}

// serveStripe serves POST /webhooks/stripe.
func (h *Handler) serveStripe(w http.ResponseWriter, r *http.Request) {
	body, result := readBody(w, r, h.cfg.StripeMaxBody)
	if result != "" {
		h.refuse(w, r, ProviderStripe, result, "body unreadable or over the cap")
		return
	}
	ev, result, reason := h.verifyStripe(body, r.Header.Get("Stripe-Signature"))
	if result != "" {
		h.refuse(w, r, ProviderStripe, result, reason)
		return
	}
	if !strings.HasPrefix(ev.ID, "evt_") || identity.ValidateMessageID(ev.ID) != nil || ev.Data == nil {
		h.refuse(w, r, ProviderStripe, ResultBadRequest, "event without a usable evt_ ID or data")
		return
	}
	ctx := r.Context()
	var (
		pe      *store.PaymentEvent
		applied store.PaymentEventResult
		ru      *store.RefundUpdate
		updated store.RefundUpdateResult
	)
	apply := func(context.Context, pgx.Tx) error { return nil }
	switch {
	case paymentEventTargets[string(ev.Type)] != "":
		var pi stripeIntent
		if err := json.Unmarshal(ev.Data.Raw, &pi); err != nil || pi.ID == "" {
			h.refuse(w, r, ProviderStripe, ResultBadRequest, "payment_intent event without a PaymentIntent")
			return
		}
		if h.foreignStripe(pi.Metadata) {
			h.ignoreForeign(w, r, ProviderStripe, "payment intent of key namespace "+strconv.Quote(pi.Metadata[payment.MetadataNamespace]))
			return
		}
		pe = paymentEvent(ev, pi)
		apply = func(ctx context.Context, tx pgx.Tx) error {
			var err error
			applied, err = store.ApplyPaymentEvent(ctx, tx, *pe)
			return err
		}
	case string(ev.Type) == eventRefunded:
		var ch stripeCharge
		if err := json.Unmarshal(ev.Data.Raw, &ch); err != nil || ch.ID == "" {
			h.refuse(w, r, ProviderStripe, ResultBadRequest, "charge.refunded event without a Charge")
			return
		}
		if h.foreignStripe(ch.Metadata) {
			h.ignoreForeign(w, r, ProviderStripe, "charge of key namespace "+strconv.Quote(ch.Metadata[payment.MetadataNamespace]))
			return
		}
		apply = func(ctx context.Context, tx pgx.Tx) error {
			return store.ApplyRefundEvent(ctx, tx, store.RefundEvent{
				EventID: ev.ID, ChargeID: ch.ID, PaymentIntentID: ch.PaymentIntent, Key: paymentKey(ch.Metadata),
				AmountRefunded: ch.AmountRefunded, Currency: ch.Currency, Refunded: ch.Refunded,
			})
		}
	case refundUpdateEvents[string(ev.Type)]:
		var rf stripeRefund
		if err := json.Unmarshal(ev.Data.Raw, &rf); err != nil || !strings.HasPrefix(rf.ID, "re_") || rf.Status == "" {
			h.refuse(w, r, ProviderStripe, ResultBadRequest, string(ev.Type)+" event without a Refund")
			return
		}
		if h.foreignStripe(rf.Metadata) {
			h.ignoreForeign(w, r, ProviderStripe, "refund of key namespace "+strconv.Quote(rf.Metadata[payment.MetadataNamespace]))
			return
		}
		key, _ := identity.Key(identity.EffectRefund, rf.Metadata["message_id"])
		ru = &store.RefundUpdate{RefundID: rf.ID, Key: key, Status: rf.Status, FailureReason: rf.FailureReason, Source: string(ev.Type) + " " + ev.ID}
		apply = func(ctx context.Context, tx pgx.Tx) error {
			var err error
			updated, err = store.ApplyRefundUpdate(ctx, tx, *ru)
			return err
		}
	}
	inserted, err := h.store.RecordProviderEvent(ctx, store.ProviderEvent{
		Consumer: ConsumerStripe, EventID: ev.ID, Payload: body, PayloadHash: sha256Hex(body), Source: "webhook",
	}, apply)
	if err != nil {
		// A refund whose creation is not recorded yet: Stripe sends the
		// event again later, by when it is.
		h.refuse(w, r, ProviderStripe, ResultError, "record event: "+err.Error())
		return
	}
	log := h.cfg.Logger.With(slog.String("provider", ProviderStripe), slog.String("event_id", ev.ID), slog.String("type", string(ev.Type)))
	if ru != nil && updated.Unrecorded(ru.Status) {
		rf := updated.Refund
		h.metrics.countRefund("not_created", ru.Status)
		log.Error("stripe reports a refund the ledger recorded as not created, its amount given back: the order may be refunded twice; operator action needed",
			"refund_id", ru.RefundID, "status", ru.Status, "order_id", rf.OrderID, "message_id", rf.MessageID, "amount", rf.Amount)
	}
	if ru != nil && updated.Changed {
		rf := updated.Refund
		h.metrics.countRefund(string(updated.Before), string(rf.State))
		if updated.Reversed() {
			log.Error("refund failed after it succeeded: the money did not reach the customer, and its receipt may have been sent; operator action needed",
				"refund_id", rf.RefundID, "order_id", rf.OrderID, "message_id", rf.MessageID, "amount", rf.Amount, "failure_code", rf.FailureCode)
		} else {
			log.Info("refund updated", "refund_id", rf.RefundID, "order_id", rf.OrderID, "from", updated.Before, "to", rf.State)
		}
		if updated.Before == store.RefundPending {
			// Only a wake-up: a workflow the signal misses finds the
			// update at its next poll, so the event is acknowledged.
			if err := h.signalRefund(ctx, rf); err != nil {
				log.Warn("refund updated; waking its workflow failed, its next poll finds it", "refund_id", rf.RefundID, "error", err)
			}
		}
	}
	if pe != nil {
		p := applied.Payment
		if !inserted {
			// A copy: the ledger may already agree with it, and the first
			// copy's signal may have failed. Read the row to signal again.
			if p, err = h.store.PaymentOfIntent(ctx, pe.PaymentIntentID, pe.Key); err != nil {
				h.refuse(w, r, ProviderStripe, ResultError, "read payment: "+err.Error())
				return
			}
		}
		switch {
		case applied.Foreign:
			log.Warn("payment event of another key namespace than the database records: not applied", "payment_intent_id", pe.PaymentIntentID, "namespace", pe.Namespace)
		case applied.Anomaly:
			log.Warn("payment event contradicts the ledger's final state: kept as an anomaly for an operator", "payment_intent_id", pe.PaymentIntentID, "recorded_state", p.State)
		case inserted && p == nil:
			log.Info("payment event for a PaymentIntent the ledger does not know: recorded in the inbox only", "payment_intent_id", pe.PaymentIntentID)
		case inserted:
			log.Info("payment event recorded", "payment_intent_id", pe.PaymentIntentID, "state", p.State, "applied", applied.Applied)
		}
		// Signalled only for the ledger's own PaymentIntent: a copy of an
		// event kept as an anomaly finds the row by the message's key too.
		if !applied.Anomaly && p != nil && p.State == pe.Target && pe.Target != store.PaymentProcessing && p.PaymentIntentID == pe.PaymentIntentID {
			if err := h.signalSettled(ctx, *p, *pe); err != nil {
				h.refuse(w, r, ProviderStripe, ResultError, "signal workflow: "+err.Error())
				return
			}
		}
	}
	h.accept(w, ProviderStripe, inserted)
}

// verifyStripe checks the signature against every configured secret. It
// returns the event, or the refusal's result and reason.
func (h *Handler) verifyStripe(body []byte, header string) (stripe.Event, string, string) {
	if header == "" {
		return stripe.Event{}, ResultBadSignature, "no Stripe-Signature header"
	}
	var last error
	for _, secret := range h.cfg.StripeSecrets {
		ev, err := webhook.ConstructEventWithOptions(body, header, secret, webhook.ConstructEventOptions{Tolerance: h.cfg.StripeTolerance})
		if err == nil {
			return ev, "", ""
		}
		switch {
		case errors.Is(err, webhook.ErrTooOld):
			// The timestamp is checked before the signature: no secret
			// can make it fresh.
			return stripe.Event{}, ResultStale, "Stripe-Signature timestamp outside the tolerance"
		case errors.Is(err, webhook.ErrNoValidSignature), errors.Is(err, webhook.ErrInvalidHeader), errors.Is(err, webhook.ErrNotSigned):
			last = err
		default:
			// Signed with this secret, but not an event this build reads
			// (not JSON, another API version).
			return stripe.Event{}, ResultBadRequest, err.Error()
		}
	}
	return stripe.Event{}, ResultBadSignature, last.Error()
}

// paymentEvent is what ev says about pi.
func paymentEvent(ev stripe.Event, pi stripeIntent) *store.PaymentEvent {
	pe := &store.PaymentEvent{
		EventID: ev.ID, EventType: string(ev.Type), PaymentIntentID: pi.ID, Key: paymentKey(pi.Metadata),
		Target: paymentEventTargets[string(ev.Type)], Status: pi.Status, ChargeID: objectID(pi.LatestCharge),
		Amount: pi.Amount, Currency: pi.Currency, PaymentMethod: objectID(pi.PaymentMethod),
		RequestedTestPaymentMethod: pi.Metadata[payment.MetadataTestPaymentMethod],
		Namespace:                  pi.Metadata[payment.MetadataNamespace],
	}
	if e := pi.LastPaymentError; e != nil {
		pe.FailureCode, pe.DeclineCode, pe.FailureMessage = e.Code, e.DeclineCode, e.Message
	}
	if ev.Type == "payment_intent.canceled" {
		pe.FailureCode = "canceled"
		if pi.CancellationReason != "" {
			pe.FailureMessage = "canceled: " + pi.CancellationReason
		}
	}
	return pe
}

// foreignStripe reports whether an object's metadata names a message of
// another key namespace (Config.Namespace): another deployment's payment,
// whose message ID may well be one of ours too. Objects that name no
// message are not effectively's and are handled as before.
func (h *Handler) foreignStripe(metadata map[string]string) bool {
	return metadata["message_id"] != "" && metadata[payment.MetadataNamespace] != h.cfg.Namespace
}

// paymentKey is the ledger key of the message a PaymentIntent names in its
// metadata, or "" when it names none.
func paymentKey(metadata map[string]string) string {
	key, err := identity.Key(identity.EffectPayment, metadata["message_id"])
	if err != nil {
		return ""
	}
	return key
}

// objectID reads a field that holds an ID or the expanded object
// (latest_charge, payment_method).
func objectID(raw json.RawMessage) string {
	var id string
	if json.Unmarshal(raw, &id) == nil {
		return id
	}
	var obj struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(raw, &obj)
	return obj.ID
}

// signalSettled tells the message's workflow that its payment settled. A
// workflow that is closed or was never started is fine: the ledger holds
// the outcome, and a running workflow reads it on its next claim.
func (h *Handler) signalSettled(ctx context.Context, p store.Payment, pe store.PaymentEvent) error {
	wfID, err := identity.WorkflowID(p.Consumer, p.MessageID)
	if err != nil {
		return fmt.Errorf("workflow of %s: %w", p.MessageID, err)
	}
	err = h.signal.SignalWorkflow(ctx, wfID, "", workflows.PaymentSettledSignal, workflows.PaymentSettled{
		PaymentIntentID: pe.PaymentIntentID, Status: pe.Status, FailureCode: pe.FailureCode, DeclineCode: pe.DeclineCode,
	})
	var notFound *serviceerror.NotFound
	if err == nil || errors.As(err, &notFound) {
		return nil
	}
	return fmt.Errorf("signal %s: %w", wfID, err)
}

// signalRefund wakes the refund workflow waiting for rf, which left
// pending. A closed workflow is fine: the ledger holds the outcome.
func (h *Handler) signalRefund(ctx context.Context, rf store.Refund) error {
	wfID, err := identity.WorkflowID(rf.Consumer, rf.MessageID)
	if err != nil {
		return fmt.Errorf("workflow of %s: %w", rf.MessageID, err)
	}
	err = h.signal.SignalWorkflow(ctx, wfID, "", workflows.RefundSettledSignal, workflows.RefundSettled{RefundID: rf.RefundID, Status: rf.RefundStatus})
	var notFound *serviceerror.NotFound
	if err == nil || errors.As(err, &notFound) {
		return nil
	}
	return fmt.Errorf("signal %s: %w", wfID, err)
}

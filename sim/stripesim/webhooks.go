package stripesim

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/effectively/effectively/sim/simfault"
)

// WebhookOptions configures the signed events the simulator delivers, the
// way Stripe does: signed with Secret in a Stripe-Signature header (a fresh
// timestamp at each attempt), at least once, in no guaranteed order,
// retried with backoff until a 2xx.
type WebhookOptions struct {
	simfault.WebhookConfig
	// Secret is the endpoint's signing secret (whsec_…).
	Secret string
}

// Events the simulator emits.
const (
	EventIntentSucceeded  = "payment_intent.succeeded"
	EventIntentProcessing = "payment_intent.processing"
	EventIntentFailed     = "payment_intent.payment_failed"
	EventIntentCanceled   = "payment_intent.canceled"
	EventChargeRefunded   = "charge.refunded"
	// EventChargeRefundUpdated is delivered, with the Refund as
	// data.object, when a refund changes status after it was created
	// (SettleRefund, Options.RefundSettleDelay).
	EventChargeRefundUpdated = "charge.refund.updated"
)

type webhooks struct {
	sender *simfault.WebhookSender
	secret string
}

// StartWebhooks makes every later PaymentIntent transition (succeeded,
// payment_failed) and refund status change (charge.refund.updated) deliver
// an event to o.URL; EmitIntentEvent and Refund emit the others. A sender already running is stopped first.
func (s *Server) StartWebhooks(o WebhookOptions) error {
	if o.Secret == "" {
		return errors.New("stripesim: a webhook secret is required")
	}
	sender, err := simfault.StartWebhooks(o.WebhookConfig)
	if err != nil {
		return err
	}
	if old := s.hooks.Swap(&webhooks{sender: sender, secret: o.Secret}); old != nil {
		old.sender.Stop()
	}
	return nil
}

// StopWebhooks stops delivering events; what is queued is dropped.
func (s *Server) StopWebhooks() {
	if old := s.hooks.Swap(nil); old != nil {
		old.sender.Stop()
	}
}

// WebhookStats counts the deliveries of the running sender.
func (s *Server) WebhookStats() simfault.WebhookStats {
	if h := s.hooks.Load(); h != nil {
		return h.sender.Stats()
	}
	return simfault.WebhookStats{}
}

// SignatureHeader is the Stripe-Signature header of payload signed with
// secret at t, as Stripe computes it.
func SignatureHeader(payload []byte, secret string, t time.Time) string {
	return "t=" + strconv.FormatInt(t.Unix(), 10) + ",v1=" + hex.EncodeToString(webhook.ComputeSignature(t, payload, secret))
}

// event is a Stripe event in its JSON shape.
type event struct {
	ID              string `json:"id"`
	Object          string `json:"object"`
	APIVersion      string `json:"api_version"`
	Created         int64  `json:"created"`
	Livemode        bool   `json:"livemode"`
	PendingWebhooks int    `json:"pending_webhooks"`
	Type            string `json:"type"`
	Data            struct {
		Object json.RawMessage `json:"object"`
	} `json:"data"`
}

// emitLocked enqueues an event of type typ about obj (marshalled now, so
// the event shows the object as it is at this transition). s.mu must be
// held. Without a running sender it does nothing.
func (s *Server) emitLocked(typ string, obj any) {
	h := s.hooks.Load()
	if h == nil {
		return
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return
	}
	ev := event{
		ID: s.nextIDLocked("evt"), Object: "event", APIVersion: stripe.APIVersion, Created: s.now().Unix(),
		PendingWebhooks: 1, Type: typ,
	}
	ev.Data.Object = raw
	body, err := json.Marshal(ev)
	if err != nil {
		return
	}
	secret := h.secret
	h.sender.Enqueue(body, func(body []byte, now time.Time) http.Header {
		return http.Header{"Stripe-Signature": {SignatureHeader(body, secret, now)}}
	})
}

// EmitIntentEvent delivers an event of type typ about PaymentIntent id,
// shown with status (its own status when empty): for transitions the
// simulator does not perform itself (processing, canceled) and for tests.
func (s *Server) EmitIntentEvent(typ, id, status string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	pi, ok := s.intents[id]
	if !ok {
		return fmt.Errorf("stripesim: no PaymentIntent %s", id)
	}
	cp := *pi
	if status != "" {
		cp.Status = status
	}
	s.emitLocked(typ, &cp)
	return nil
}

// refundedCharge is a Charge as a charge.refunded event shows it.
type refundedCharge struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	Amount         int64             `json:"amount"`
	AmountRefunded int64             `json:"amount_refunded"`
	Currency       string            `json:"currency"`
	PaymentIntent  string            `json:"payment_intent"`
	Refunded       bool              `json:"refunded"`
	Metadata       map[string]string `json:"metadata"`
}

// Refund refunds the latest charge of PaymentIntent id in full and delivers
// charge.refunded.
func (s *Server) Refund(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	pi, ok := s.intents[id]
	if !ok || pi.LatestCharge == nil || pi.Status != statusSucceeded {
		return fmt.Errorf("stripesim: PaymentIntent %s has no succeeded charge to refund", id)
	}
	s.emitLocked(EventChargeRefunded, &refundedCharge{
		ID: *pi.LatestCharge, Object: "charge", Amount: pi.Amount, AmountRefunded: pi.Amount, Currency: pi.Currency,
		PaymentIntent: pi.ID, Refunded: true, Metadata: pi.Metadata,
	})
	return nil
}

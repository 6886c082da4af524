package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sendgrid/sendgrid-go/helpers/eventwebhook"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/leaf/identity"
)

// sendgridEvent is the part of one Event Webhook event effectively reads.
// The mail's custom_args arrive as top-level fields; idempotency_key and
// effectively_namespace (email.ArgNamespace) are the ones effectively sends
// (see internal/adapter/email).
type sendgridEvent struct {
	SGEventID      string `json:"sg_event_id"`
	SGMessageID    string `json:"sg_message_id"`
	Event          string `json:"event"`
	Timestamp      int64  `json:"timestamp"`
	Reason         string `json:"reason"`
	IdempotencyKey string `json:"idempotency_key"`
	Namespace      string `json:"effectively_namespace"`
}

// ourMailKey reports whether key is the key of a mail effectively sends:
// an order receipt ("email:…", identity.EffectEmail, or "orderemail:…",
// identity.EffectOrderEmail) or a refund receipt ("refundemail:…",
// identity.EffectRefundEmail).
func ourMailKey(key string) bool {
	for _, e := range []identity.Effect{identity.EffectEmail, identity.EffectRefundEmail, identity.EffectOrderEmail} {
		if strings.HasPrefix(key, string(e)+":") {
			return true
		}
	}
	return false
}

// foreign reports whether ev is about a mail effectively sent under another
// key namespace (Config.Namespace): another deployment's receipt, whose key
// may well be one of ours too.
func (h *Handler) foreign(ev sendgridEvent) bool {
	return ourMailKey(ev.IdempotencyKey) && ev.Namespace != h.cfg.Namespace
}

// maxEventIDLen bounds sg_event_id, which becomes an inbox message ID.
const maxEventIDLen = 255

// serveSendGrid serves POST /webhooks/sendgrid: a signed batch of events.
func (h *Handler) serveSendGrid(w http.ResponseWriter, r *http.Request) {
	body, result := readBody(w, r, h.cfg.SendGridMaxBody)
	if result != "" {
		h.refuse(w, r, ProviderSendGrid, result, "body unreadable or over the cap")
		return
	}
	if result, reason := h.verifySendGrid(body, r.Header.Get(eventwebhook.VerificationHTTPHeader), r.Header.Get(eventwebhook.TimestampHTTPHeader)); result != "" {
		h.refuse(w, r, ProviderSendGrid, result, reason)
		return
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(body, &raws); err != nil {
		h.refuse(w, r, ProviderSendGrid, ResultBadRequest, "not a JSON array of events")
		return
	}
	events := make([]sendgridEvent, len(raws))
	for i, raw := range raws {
		if err := json.Unmarshal(raw, &events[i]); err != nil || events[i].SGEventID == "" || len(events[i].SGEventID) > maxEventIDLen {
			h.refuse(w, r, ProviderSendGrid, ResultBadRequest, fmt.Sprintf("event %d has no usable sg_event_id", i))
			return
		}
	}
	ctx := r.Context()
	anyNew, anyOurs := false, false
	for i, ev := range events {
		if h.foreign(ev) {
			continue // not recorded: another deployment's endpoint records it
		}
		anyOurs = true
		inserted, err := h.recordSendGrid(ctx, ev, raws[i])
		if err != nil {
			// The events before it are committed; SendGrid retries the
			// batch, and their copies are duplicates.
			h.refuse(w, r, ProviderSendGrid, ResultError, "record event: "+err.Error())
			return
		}
		anyNew = anyNew || inserted
	}
	if !anyOurs && len(events) > 0 {
		h.ignoreForeign(w, r, ProviderSendGrid, fmt.Sprintf("%d events of other key namespaces", len(events)))
		return
	}
	h.accept(w, ProviderSendGrid, anyNew)
}

// recordSendGrid records one event through the inbox and, when it names a
// receipt of ours, the receipt ledger.
func (h *Handler) recordSendGrid(ctx context.Context, ev sendgridEvent, raw []byte) (bool, error) {
	var res store.EmailEventResult
	// The caller skipped other namespaces' mails.
	ours := ourMailKey(ev.IdempotencyKey)
	inserted, err := h.store.RecordProviderEvent(ctx, store.ProviderEvent{
		Consumer: ConsumerSendGrid, EventID: ev.SGEventID, Payload: raw, PayloadHash: sha256Hex(raw), Source: "webhook",
	}, func(ctx context.Context, tx pgx.Tx) error {
		if !ours {
			return nil
		}
		var occurred time.Time
		if ev.Timestamp > 0 {
			occurred = time.Unix(ev.Timestamp, 0).UTC()
		}
		var err error
		res, err = store.ApplyEmailEvent(ctx, tx, store.EmailEvent{
			SGEventID: ev.SGEventID, Key: ev.IdempotencyKey, Event: ev.Event,
			SGMessageID: ev.SGMessageID, Reason: ev.Reason, OccurredAt: occurred,
		})
		return err
	})
	if err != nil {
		return false, err
	}
	if inserted && ours {
		h.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "sendgrid event recorded",
			slog.String("event", ev.Event), slog.String("idempotency_key", ev.IdempotencyKey),
			slog.Bool("receipt_changed", res.ReceiptChanged), slog.Bool("unknown_settled", res.Settled))
		if res.Settled {
			h.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "receipt recorded unknown is sent: sendgrid reported it",
				slog.String("event", ev.Event), slog.String("idempotency_key", ev.IdempotencyKey))
		}
	}
	return inserted, nil
}

// verifySendGrid checks the ECDSA signature over timestamp+body and the
// timestamp's age, which the helper leaves to its caller.
func (h *Handler) verifySendGrid(body []byte, sig, ts string) (result, reason string) {
	if sig == "" || ts == "" {
		return ResultBadSignature, "no signature or timestamp header"
	}
	ok, err := eventwebhook.VerifySignature(h.sgKey, body, sig, ts)
	if err != nil || !ok {
		return ResultBadSignature, "signature does not verify with the configured public key"
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return ResultBadRequest, "timestamp is not a number of seconds"
	}
	age := h.cfg.Now().Sub(time.Unix(secs, 0))
	if age > h.cfg.SendGridTolerance || age < -h.cfg.SendGridTolerance {
		return ResultStale, fmt.Sprintf("timestamp %s away from now, tolerance %s", age.Round(time.Second), h.cfg.SendGridTolerance)
	}
	return "", ""
}

package sendgridsim

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"time"

	"github.com/sendgrid/sendgrid-go/helpers/eventwebhook"

	"github.com/effectively/effectively/sim/simfault"
)

// WebhookOptions configures the Event Webhook the simulator delivers the way
// SendGrid does: each batch signed with Key (ECDSA P-256 over timestamp +
// body), at least once, in no guaranteed order, retried with backoff until
// a 2xx.
type WebhookOptions struct {
	simfault.WebhookConfig
	// Key signs the batches; its public half is what the receiver verifies
	// with (PublicKeyBase64).
	Key *ecdsa.PrivateKey
	// Events are the events sent for every delivered mail, in order of
	// occurrence. Default processed, delivered.
	Events []string
}

type webhooks struct {
	sender *simfault.WebhookSender
	key    *ecdsa.PrivateKey
	events []string
}

// GenerateWebhookKey returns a new signing key and its public half in the
// form SendGrid's settings page shows (base64 of the DER public key).
func GenerateWebhookKey() (*ecdsa.PrivateKey, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", fmt.Errorf("generate webhook key: %w", err)
	}
	pub, err := PublicKeyBase64(key)
	return key, pub, err
}

// PublicKeyBase64 is key's public half as SendGrid shows it.
func PublicKeyBase64(key *ecdsa.PrivateKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", fmt.Errorf("encode webhook public key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(der), nil
}

// SignatureHeaders are the headers that sign body at t with key, as
// SendGrid's Event Webhook sends them.
func SignatureHeaders(body []byte, key *ecdsa.PrivateKey, t time.Time) http.Header {
	ts := strconv.FormatInt(t.Unix(), 10)
	h := sha256.New()
	h.Write([]byte(ts))
	h.Write(body)
	sig, err := ecdsa.SignASN1(rand.Reader, key, h.Sum(nil))
	if err != nil {
		sig = nil // never: crypto/rand does not fail
	}
	return http.Header{
		eventwebhook.VerificationHTTPHeader: {base64.StdEncoding.EncodeToString(sig)},
		eventwebhook.TimestampHTTPHeader:    {ts},
	}
}

// StartWebhooks makes every later delivered mail send o.Events to o.URL.
// A sender already running is stopped first.
func (s *Server) StartWebhooks(o WebhookOptions) error {
	if o.Key == nil {
		return errors.New("sendgridsim: a webhook signing key is required")
	}
	if len(o.Events) == 0 {
		o.Events = []string{"processed", "delivered"}
	}
	sender, err := simfault.StartWebhooks(o.WebhookConfig)
	if err != nil {
		return err
	}
	if old := s.hooks.Swap(&webhooks{sender: sender, key: o.Key, events: o.Events}); old != nil {
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

// emitLocked enqueues the configured events of mail m, accepted as
// xMessageID, each as a batch of one. s.mu must be held.
func (s *Server) emitLocked(m Delivered) {
	h := s.hooks.Load()
	if h == nil {
		return
	}
	email := ""
	if len(m.To) > 0 {
		email = m.To[0]
	}
	for i, name := range h.events {
		ev := map[string]any{}
		// custom_args arrive as top-level fields, under SendGrid's own.
		for k, v := range maps.All(m.CustomArgs) {
			ev[k] = v
		}
		ev["email"] = email
		ev["timestamp"] = m.Time.Unix() + int64(i)
		ev["event"] = name
		ev["sg_event_id"] = newEventID()
		ev["sg_message_id"] = m.XMessageID + ".sim" + strconv.Itoa(i) + ".0"
		ev["smtp-id"] = "<" + m.XMessageID + "@sendgridsim>"
		body, err := json.Marshal([]any{ev})
		if err != nil {
			continue
		}
		key := h.key
		h.sender.Enqueue(body, func(body []byte, now time.Time) http.Header { return SignatureHeaders(body, key, now) })
	}
}

// newEventID returns a random sg_event_id.
func newEventID() string {
	var b [18]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

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
	"sync"
	"time"

	"github.com/sendgrid/sendgrid-go/helpers/eventwebhook"

	"github.com/effectively/effectively/sim/simfault"
)

// WebhookOptions configures the Event Webhook the simulator delivers the way
// SendGrid does: each batch (a JSON array of events) signed with Key (ECDSA
// P-256 over timestamp + body), at least once, in no guaranteed order,
// retried whole with backoff until a 2xx. Copies, MaxDelay, retries and the
// sender's counters apply to batches.
type WebhookOptions struct {
	simfault.WebhookConfig
	// Key signs the batches; its public half is what the receiver verifies
	// with (PublicKeyBase64).
	Key *ecdsa.PrivateKey
	// Events are the events sent for every delivered mail, in order of
	// occurrence. Default processed, delivered.
	Events []string
	// BatchWindow, when positive, batches events as SendGrid does: the
	// first event queued opens a batch, every event queued within
	// BatchWindow after it joins it, and the batch is posted as one array
	// when the window ends, whichever mails its events are of. Default 0:
	// each event is posted alone, as a batch of one.
	BatchWindow time.Duration
	// MaxBatch, with BatchWindow, posts a batch as soon as it holds
	// MaxBatch events; without BatchWindow it does nothing. Default 0: no
	// bound on the count. A batch is also posted before it would pass
	// MaxBatchBytes.
	MaxBatch int
}

// MaxBatchBytes bounds the body of a batch when WebhookOptions.BatchWindow
// is set (an event larger than it goes alone): SendGrid posts a batch
// "when the batch reaches 768 KB".
const MaxBatchBytes = 768 << 10

type webhooks struct {
	sender *simfault.WebhookSender
	key    *ecdsa.PrivateKey
	events []string
	window time.Duration
	max    int

	mu      sync.Mutex
	batch   []json.RawMessage // the open batch, oldest first
	size    int               // its body length: brackets and commas included
	timer   *time.Timer       // ends the open batch's window
	gen     int               // counts batches opened, so a late timer spares the next
	stopped bool
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
	h := &webhooks{sender: sender, key: o.Key, events: o.Events, window: max(o.BatchWindow, 0), max: max(o.MaxBatch, 0)}
	if old := s.hooks.Swap(h); old != nil {
		old.stop()
	}
	return nil
}

// StopWebhooks stops delivering events; what is queued, an open batch
// included, is dropped.
func (s *Server) StopWebhooks() {
	if old := s.hooks.Swap(nil); old != nil {
		old.stop()
	}
}

// WebhookStats counts the deliveries of the running sender.
func (s *Server) WebhookStats() simfault.WebhookStats {
	if h := s.hooks.Load(); h != nil {
		return h.sender.Stats()
	}
	return simfault.WebhookStats{}
}

// emitLocked queues the configured events of mail m, accepted as
// xMessageID. s.mu must be held.
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
		raw, err := json.Marshal(ev)
		if err != nil {
			continue
		}
		h.add(raw)
	}
}

// add puts one event in a batch: alone without a window, else in the open
// batch, which it opens, or posts when full. It never blocks on the network.
func (h *webhooks) add(ev json.RawMessage) {
	if h.window <= 0 {
		h.post([]json.RawMessage{ev})
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	if len(h.batch) > 0 && h.size+1+len(ev) > MaxBatchBytes {
		h.flushLocked()
	}
	if len(h.batch) == 0 {
		h.size = 2 // []
		h.gen++
		gen := h.gen
		h.timer = time.AfterFunc(h.window, func() { h.flush(gen) })
	} else {
		h.size++ // ,
	}
	h.batch = append(h.batch, ev)
	h.size += len(ev)
	if h.max > 0 && len(h.batch) >= h.max {
		h.flushLocked()
	}
}

// flush posts batch gen when its window ends, unless it was posted full.
func (h *webhooks) flush(gen int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.stopped && h.gen == gen {
		h.flushLocked()
	}
}

// flushLocked posts the open batch, if any, and closes it. h.mu is held.
func (h *webhooks) flushLocked() {
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
	if len(h.batch) > 0 {
		h.post(h.batch)
	}
	h.batch, h.size = nil, 0
}

// post enqueues events as one signed array.
func (h *webhooks) post(events []json.RawMessage) {
	body, err := json.Marshal(events)
	if err != nil {
		return
	}
	key := h.key
	h.sender.Enqueue(body, func(body []byte, now time.Time) http.Header { return SignatureHeaders(body, key, now) })
}

// stop drops the open batch and stops the sender.
func (h *webhooks) stop() {
	h.mu.Lock()
	h.stopped = true
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
	h.batch, h.size = nil, 0
	h.mu.Unlock()
	h.sender.Stop()
}

// newEventID returns a random sg_event_id.
func newEventID() string {
	var b [18]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

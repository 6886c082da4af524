package outbox

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/effectively/effectively/internal/adapter/store"
)

// JetStreamConfig configures a JetStream Publisher. Zero values take the
// defaults noted per field.
type JetStreamConfig struct {
	// Stream is the stream the subjects must land in; a publish that no
	// stream (or another one) captures fails instead of being lost.
	// Default DefaultStream.
	Stream string
	// SubjectPrefix is prepended to each event's topic. Default
	// DefaultSubjectPrefix.
	SubjectPrefix string
}

// JetStreamPublisher publishes events to a JetStream stream with
// Nats-Msg-Id set to the event ID, so that the stream stores a repeat
// within its duplicate window once (the PubAck reports Duplicate).
type JetStreamPublisher struct {
	js  jetstream.JetStream
	cfg JetStreamConfig
}

var _ Publisher = (*JetStreamPublisher)(nil)

// NewJetStreamPublisher returns a Publisher on js.
func NewJetStreamPublisher(js jetstream.JetStream, cfg JetStreamConfig) *JetStreamPublisher {
	if cfg.Stream == "" {
		cfg.Stream = DefaultStream
	}
	if cfg.SubjectPrefix == "" {
		cfg.SubjectPrefix = DefaultSubjectPrefix
	}
	cfg.SubjectPrefix = strings.TrimSuffix(cfg.SubjectPrefix, ".")
	return &JetStreamPublisher{js: js, cfg: cfg}
}

// Name is "jetstream".
func (p *JetStreamPublisher) Name() string { return "jetstream" }

// Subject is the subject an event of topic is published on.
func (p *JetStreamPublisher) Subject(topic string) string { return p.cfg.SubjectPrefix + "." + topic }

// Publish publishes e and waits for the stream's ack.
func (p *JetStreamPublisher) Publish(ctx context.Context, e store.OutboxEvent) (bool, error) {
	msg := nats.NewMsg(p.Subject(e.Topic))
	msg.Data = e.Payload
	msg.Header.Set("Content-Type", "application/json")
	ack, err := p.js.PublishMsg(ctx, msg, jetstream.WithMsgID(e.EventID), jetstream.WithExpectStream(p.cfg.Stream))
	if err != nil {
		return false, err
	}
	return ack.Duplicate, nil
}

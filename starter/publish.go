package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/schollz/progressbar/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/term"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/intake/jetstream"
	"github.com/effectively/effectively/internal/intake/route"
	"github.com/effectively/effectively/internal/leaf/tracing"
)

// Statuses of a published message.
const (
	pubStored    = "published"
	pubDuplicate = "duplicate"
)

// publishResult is the JSON line printed per message.
type publishResult struct {
	Line      int    `json:"line"`
	MessageID string `json:"message_id,omitempty"`
	Subject   string `json:"subject,omitempty"`
	MsgID     string `json:"nats_msg_id,omitempty"`
	Stream    string `json:"stream,omitempty"`
	Sequence  uint64 `json:"seq,omitempty"`
	// Exchange is RabbitMQ's (--broker rabbitmq); Subject is then the
	// routing key, the message type.
	Exchange string `json:"exchange,omitempty"`
	// Topic, Partition and Offset say where Kafka stored the record.
	Topic     string `json:"topic,omitempty"`
	Partition int32  `json:"partition,omitempty"`
	Offset    int64  `json:"offset,omitempty"`
	// Status is published (stored by the stream) or duplicate (dropped by
	// the broker's duplicate window: an identical copy was published before).
	Status string `json:"status"`
	// Invalid is set when the message does not decode; it is published
	// anyway, and the worker quarantines it with this reason.
	Invalid string `json:"invalid,omitempty"`
}

// Brokers `starter publish --broker` names.
const (
	brokerNATS     = "nats"
	brokerKafka    = "kafka"
	brokerRabbitMQ = "rabbitmq"
)

// brokerPublisher puts one message on the broker a source consumes.
type brokerPublisher interface {
	// Publish publishes raw (m is nil when it does not decode; typ names
	// its type or "invalid") with ctx's trace context in the headers, and
	// fills in where it went and whether the broker dropped it as a copy.
	Publish(ctx context.Context, raw []byte, m *message.Message, typ string, res *publishResult) error
	// Where names the destination in the summary line ("stream EFFECTIVELY").
	Where() string
	Close()
}

// newPublisher connects to broker. A broker this build cannot publish to
// yet is a usage error.
func newPublisher(ctx context.Context, cfg config.Config, broker string) (brokerPublisher, error) {
	switch broker {
	case brokerNATS:
		return newNATSPublisher(ctx, cfg)
	case brokerRabbitMQ:
		return newRabbitMQPublisher(cfg)
	case brokerKafka:
		return newKafkaPublisher(ctx, cfg)
	}
	return nil, fmt.Errorf("%w: --broker %q: use nats, kafka or rabbitmq", errUsage, broker)
}

// cmdPublish puts each message of a file or stdin on the broker the worker
// consumes (--broker, default nats: the JetStream subject), for the worker
// to record and start.
func cmdPublish(ctx context.Context, cfg config.Config, args []string, stdin io.Reader, stdout, stderr io.Writer, logger *slog.Logger) (int, error) {
	fs := flag.NewFlagSet("publish", flag.ContinueOnError)
	fs.SetOutput(stderr)
	broker := fs.String("broker", brokerNATS, "broker to publish to: nats, kafka or rabbitmq")
	if err := fs.Parse(args); err != nil {
		return exitUsage, fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() != 1 {
		return exitUsage, fmt.Errorf("%w: publish takes one argument, a file or -", errUsage)
	}
	pub, err := newPublisher(ctx, cfg, *broker)
	if err != nil {
		if errors.Is(err, errUsage) {
			return exitUsage, err
		}
		return exitError, err
	}
	defer pub.Close()
	r, size, closeInput, err := openInput(fs.Arg(0), stdin)
	if err != nil {
		return exitError, err
	}
	defer closeInput()

	// Each message is published in a span of its own, whose traceparent
	// goes in the message's headers: the worker continues that trace. Off
	// unless the OTEL_* variables turn it on (internal/leaf/tracing).
	shutdownTracing, _, err := tracing.Setup(ctx, config.OTelLookup, "effectively-starter")
	if err != nil {
		return exitUsage, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = shutdownTracing(sctx)
	}()

	bar, r := progress(r, size, stderr, "publishing")
	counts := map[string]int{}
	invalid := 0
	enc := json.NewEncoder(stdout)
	err = route.Default().DecodeStream(r, func(line int, raw []byte, m *message.Message, derr error) error {
		res := publishResult{Line: line}
		typ := "invalid"
		if derr != nil {
			res.Invalid = derr.Error()
			invalid++
			if raw == nil {
				// Longer than message.MaxSize: nothing kept to publish.
				res.Status = "skipped"
				counts[res.Status]++
				return enc.Encode(res)
			}
			m = nil
		} else {
			res.MessageID, typ = m.ID, m.Type
		}
		sctx, span := tracing.Tracer().Start(ctx, "publish "+typ, trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(attribute.String("effectively.message_id", res.MessageID)))
		err := pub.Publish(sctx, raw, m, typ, &res)
		span.End()
		if err != nil {
			return fmt.Errorf("message at line %d: %w", line, err)
		}
		if res.Status == pubDuplicate {
			logger.Info("the broker dropped an identical copy", "message_id", res.MessageID, "nats_msg_id", res.MsgID)
		}
		counts[res.Status]++
		return enc.Encode(res)
	})
	if bar != nil {
		_ = bar.Finish()
	}
	fmt.Fprintf(stderr, "published %d messages to %s: %d stored, %d duplicate (dropped by the broker), %d invalid (the worker quarantines them), %d skipped (too large)\n",
		counts[pubStored]+counts[pubDuplicate]+counts["skipped"], pub.Where(), counts[pubStored], counts[pubDuplicate], invalid, counts["skipped"])
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return exitError, fmt.Errorf("interrupted: %w", err)
		}
		return exitError, err
	}
	if invalid > 0 {
		return exitInvalid, nil
	}
	return exitOK, nil
}

// natsPublisher publishes to the JetStream subject the worker's jetstream
// source consumes, with Nats-Msg-Id (jetstream.MsgID) so that the broker
// drops an identical copy within its duplicate window.
type natsPublisher struct {
	cfg    config.Config
	nc     *nats.Conn
	js     natsjs.JetStream
	stream string
}

func newNATSPublisher(ctx context.Context, cfg config.Config) (*natsPublisher, error) {
	if !cfg.NATS.Enabled() {
		return nil, fmt.Errorf("%w: NATS_URL is off; publish needs a broker", errUsage)
	}
	nc, err := cfg.NATS.Connect("effectively-starter")
	if err != nil {
		return nil, fmt.Errorf("connect to nats (NATS_URL; credential %s, tls %s): %w", cfg.NATS.Auth.Method(), cfg.NATS.Auth.TLS(), err)
	}
	js, err := natsjs.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	stream := cfg.NATS.JetStream.Stream
	if _, err := js.Stream(ctx, stream); err != nil {
		nc.Close()
		return nil, fmt.Errorf("stream %s (NATS_STREAM; the worker creates it at its first start): %w", stream, err)
	}
	return &natsPublisher{cfg: cfg, nc: nc, js: js, stream: stream}, nil
}

func (p *natsPublisher) Where() string { return "stream " + p.stream }

func (p *natsPublisher) Close() { p.nc.Close() }

func (p *natsPublisher) Publish(ctx context.Context, raw []byte, m *message.Message, typ string, res *publishResult) error {
	res.Stream = p.stream
	var opts []natsjs.PublishOpt
	if m != nil {
		res.MsgID = jetstream.MsgID(m)
		opts = append(opts, natsjs.WithMsgID(res.MsgID), natsjs.WithExpectStream(p.stream))
	}
	subject, err := jetstream.PublishSubject(p.cfg.NATS.JetStream.Subject, typ)
	if err != nil {
		return fmt.Errorf("NATS_SUBJECT: %w", err)
	}
	res.Subject = subject
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("messaging.system", "nats"), attribute.String("messaging.destination.name", subject))
	msg := nats.NewMsg(subject)
	msg.Data = raw
	tracing.Propagator.Inject(ctx, tracing.HeaderCarrier(msg.Header))
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ack, err := p.js.PublishMsg(pctx, msg, opts...)
	if err != nil {
		return fmt.Errorf("publish to %s: %w", subject, err)
	}
	res.Sequence, res.Status = ack.Sequence, pubStored
	if ack.Duplicate {
		res.Status = pubDuplicate
	}
	return nil
}

// openInput opens name ("-" is stdin) and returns its size when known
// (-1 otherwise).
func openInput(name string, stdin io.Reader) (r io.Reader, size int64, closeFn func(), err error) {
	if name == "-" {
		return stdin, -1, func() {}, nil
	}
	f, err := os.Open(name) //nolint:gosec // the CLI reads the file its user names
	if err != nil {
		return nil, 0, nil, fmt.Errorf("open messages: %w", err)
	}
	size = -1
	if fi, err := f.Stat(); err == nil {
		size = fi.Size()
	}
	return f, size, func() { _ = f.Close() }, nil
}

// progress wraps r in a progress bar on stderr when stderr is a terminal and
// the size is known.
func progress(r io.Reader, size int64, stderr io.Writer, what string) (*progressbar.ProgressBar, io.Reader) {
	f, ok := stderr.(*os.File)
	if !ok || size <= 0 || !term.IsTerminal(int(f.Fd())) {
		return nil, r
	}
	bar := progressbar.DefaultBytes(size, what)
	return bar, io.TeeReader(r, bar)
}

package jetstream_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/intake/jetstream"
	"github.com/effectively/effectively/tools/testenv"
)

// TestCreatedStreamsRefuseOversizedMessages creates the message and events
// streams as the worker does (testenv uses jetstream.EnsureStream): both carry
// MaxMsgSize, a message of the intake's limit with a long Nats-Msg-Id and a
// traceparent is stored, and one byte past the stream's limit is refused by
// the server.
func TestCreatedStreamsRefuseOversizedMessages(t *testing.T) {
	j := testenv.NewJetStream(t, testenv.JetStreamOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, name := range []string{j.Stream, j.EventsStream} {
		st, err := j.JS.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().Config.MaxMsgSize; got != jetstream.MaxStreamMsgSize {
			t.Errorf("stream %s has MaxMsgSize %d, want %d", name, got, jetstream.MaxStreamMsgSize)
		}
		if jetstream.LooseMessageLimit(st.CachedInfo().Config) {
			t.Errorf("stream %s counts as loose", name)
		}
	}
	subject, err := jetstream.PublishSubject(j.Subject, "order.placed")
	if err != nil {
		t.Fatal(err)
	}
	publish := func(size int) error {
		// A Msg-Id of its own per size: the broker would drop a repeat as a
		// duplicate before looking at its size.
		msg := nats.NewMsg(subject)
		msg.Data = bytes.Repeat([]byte("x"), size)
		msg.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
		_, err := j.JS.PublishMsg(ctx, msg, natsjs.WithMsgID(fmt.Sprintf("%s#%016x", bytes.Repeat([]byte("m"), 255), size)),
			natsjs.WithExpectStream(j.Stream))
		return err
	}
	if err := publish(message.MaxSize); err != nil {
		t.Fatalf("a message of the intake's limit (%d bytes) with headers was refused: %v", message.MaxSize, err)
	}
	err = publish(jetstream.MaxStreamMsgSize + 1)
	var apiErr *natsjs.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != errCodeMessageTooLarge {
		t.Fatalf("publish of %d bytes: %v; want the server's refusal (message size exceeds maximum)", jetstream.MaxStreamMsgSize+1, err)
	}
	info, err := j.JS.Stream(ctx, j.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if si, err := info.Info(ctx); err != nil || si.State.Msgs != 1 {
		t.Errorf("stream holds %v messages (%v), want 1", si.State.Msgs, err)
	}
}

// TestEnsureStreamLeavesAnExistingStream: a stream that exists with no size
// limit is returned unchanged (it is the broker owner's), and counts as
// loose so that the worker warns about it.
func TestEnsureStreamLeavesAnExistingStream(t *testing.T) {
	j := testenv.NewJetStream(t, testenv.JetStreamOptions{MaxMsgSize: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, created, err := jetstream.EnsureStream(ctx, j.JS, jetstream.StreamSpec{Name: j.Stream, Subjects: []string{j.Subject}})
	if err != nil || created {
		t.Fatalf("EnsureStream = created %v, %v; want the existing stream", created, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxMsgSize != -1 || !jetstream.LooseMessageLimit(info.Config) {
		t.Errorf("existing stream: MaxMsgSize %d, loose %v; want -1 (unchanged), loose", info.Config.MaxMsgSize, jetstream.LooseMessageLimit(info.Config))
	}
	for _, c := range []natsjs.StreamConfig{{MaxMsgSize: 0}, {MaxMsgSize: jetstream.MaxStreamMsgSize + 1}, {MaxMsgSize: 1 << 20}} {
		if !jetstream.LooseMessageLimit(c) {
			t.Errorf("MaxMsgSize %d does not count as loose", c.MaxMsgSize)
		}
	}
	if jetstream.LooseMessageLimit(natsjs.StreamConfig{MaxMsgSize: 1 << 10}) {
		t.Error("a tighter limit counts as loose")
	}
}

// TestEnsureStreamsWarns: EnsureStreams creates a missing stream and says
// so, and warns, naming the stream, about an existing one that keeps
// messages longer than the retention or has no size limit of its own.
func TestEnsureStreamsWarns(t *testing.T) {
	j := testenv.NewJetStream(t, testenv.JetStreamOptions{MaxMsgSize: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	fresh := j.Stream + "_FRESH"
	err := jetstream.EnsureStreams(ctx, j.JS, logger,
		jetstream.StreamSpec{Name: j.Stream, Subjects: []string{j.Subject}, MaxAge: 30 * time.Minute}, // it keeps 1h
		jetstream.StreamSpec{Name: fresh, Subjects: []string{fresh + ".>"}, MaxAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.JS.DeleteStream(context.Background(), fresh) })
	out := buf.String()
	for _, want := range []string{
		"level=WARN msg=\"stream keeps messages longer than the retention",
		"level=WARN msg=\"stream stores messages larger than the intake accepts",
		"level=INFO msg=\"created stream\" stream=" + fresh,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "stream="+j.Stream+" ") != 2 {
		t.Errorf("want two warnings naming %s:\n%s", j.Stream, out)
	}
}

// errCodeMessageTooLarge is the JetStream API error code of a publish over
// the stream's MaxMsgSize ("message size exceeds maximum allowed").
const errCodeMessageTooLarge = 10054

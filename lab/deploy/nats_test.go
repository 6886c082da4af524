package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/intake/jetstream"
)

// natsConf is the NATS server configuration the compose stack runs with.
const natsConf = "deploy/nats/nats.conf"

// natsUsers maps each NATS user of natsConf to the variable, in the nats
// service's environment, its password is read from.
var natsUsers = map[string]string{
	"worker":    "NATS_WORKER_PASSWORD",
	"publisher": "NATS_PUBLISHER_PASSWORD",
}

// natsServer is a nats-server started from natsConf.
type natsServer struct {
	url, monitor string
}

// startNATS runs Debian's nats-server with natsConf on free loopback ports,
// a temporary store and the passwords in env, as the compose service runs
// it (the same file; -sd as in its command).
func startNATS(t *testing.T, env map[string]string) natsServer {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		bin = "/usr/sbin/nats-server"
		if _, serr := os.Stat(bin); serr != nil {
			t.Fatal("nats-server is required: apt-get install nats-server (Debian's package; .ci/run installs it)")
		}
	}
	client, monitor := freeAddr(t), freeAddr(t)
	_, port, _ := net.SplitHostPort(client)
	_, mport, _ := net.SplitHostPort(monitor)
	cmd := exec.Command(bin, "-c", filepath.Join(repoRoot(t), natsConf),
		"-a", "127.0.0.1", "-p", port, "-m", mport, "-sd", t.TempDir())
	cmd.Env = os.Environ()
	for _, v := range natsUsers {
		cmd.Env = append(cmd.Env, v+"="+env[v])
	}
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if err := <-exited; t.Failed() {
			t.Logf("nats-server output (%v):\n%s", err, out.String())
		}
	})
	s := natsServer{url: "nats://" + client, monitor: "http://" + monitor}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("nats-server -c %s exited: %v\n%s", natsConf, err, out.String())
		default:
		}
		resp, err := http.Get(s.monitor + "/healthz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server did not become healthy: %v\n%s", err, out.String())
		}
	}
}

// lockedBuffer collects a process's output.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// natsClient is a connection as one user, with the permission errors the
// server sent it.
type natsClient struct {
	user string
	nc   *nats.Conn
	js   natsjs.JetStream
	errs chan error
}

func connectNATS(t *testing.T, s natsServer, user, password string) *natsClient {
	t.Helper()
	c := &natsClient{user: user, errs: make(chan error, 64)}
	nc, err := nats.Connect(s.url, nats.UserInfo(user, password), nats.Name("deploy-test-"+user),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case c.errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	c.nc = nc
	if c.js, err = natsjs.New(nc); err != nil {
		t.Fatal(err)
	}
	return c
}

// refusedPublish checks that the server refuses c's plain publish to subject.
func (c *natsClient) refusedPublish(t *testing.T, subject string) {
	t.Helper()
	if err := c.nc.Publish(subject, []byte("{}")); err != nil {
		t.Fatalf("%s: publish %s: %v", c.user, subject, err)
	}
	if err := c.nc.Flush(); err != nil {
		t.Fatalf("%s: flush: %v", c.user, err)
	}
	if !c.violation(subject) {
		t.Errorf("user %s may publish to %s", c.user, subject)
	}
}

// refusedRequest checks that op, a JetStream API call, fails and that the
// server refused c's publish to a subject beginning with prefix (the API
// subject the call uses): the call failed for want of the permission.
func (c *natsClient) refusedRequest(t *testing.T, what, prefix string, op func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	err := op(ctx)
	if err == nil || !c.violation(prefix) {
		t.Errorf("user %s may %s (%s…: %v)", c.user, what, prefix, err)
	}
}

// violation waits for the server's permissions violation for publishing to
// a subject beginning with prefix.
func (c *natsClient) violation(prefix string) bool {
	timeout := time.After(3 * time.Second)
	for {
		select {
		case err := <-c.errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(strings.ToLower(err.Error()), strings.ToLower(`publish to "`+prefix)) {
				return true
			}
		case <-timeout:
			return false
		}
	}
}

// TestNATSConfPermissions runs nats-server with the compose stack's
// deploy/nats/nats.conf and the passwords deploy/compose-env.sh generates,
// and checks each user's rights with the streams and subjects the worker and
// the starter use under docker-compose.yml's environment: no anonymous or
// wrong-password client; the worker creates the streams and the consumer,
// consumes and acks, and publishes events, but cannot delete or purge a
// stream nor publish intake messages; the publisher publishes intake
// messages (with the stream lookup `starter publish` makes first) and
// nothing else: no events, no stream creation, no reading of the messages.
func TestNATSConfPermissions(t *testing.T) {
	p := load(t)
	natsEnv := map[string]string{}
	for k, v := range p.Services["nats"].Environment {
		if v != nil {
			natsEnv[k] = *v
		}
	}
	svcConfig := func(name string) config.Config {
		env := map[string]string{}
		for k, v := range p.Services[name].Environment {
			if v != nil {
				env[k] = *v
			}
		}
		cfg, err := config.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		if err != nil {
			t.Fatalf("service %s: %v", name, err)
		}
		return cfg
	}
	wcfg, scfg := svcConfig("worker"), svcConfig("starter")
	s := startNATS(t, natsEnv)

	// Anonymous and wrong-password clients are refused.
	if nc, err := nats.Connect(s.url); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("an anonymous client connects: %v, want %v", err, nats.ErrAuthorization)
		if err == nil {
			nc.Close()
		}
	}
	if nc, err := nats.Connect(s.url, nats.UserInfo("publisher", natsEnv[natsUsers["worker"]])); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("user publisher with the worker's password connects: %v, want %v", err, nats.ErrAuthorization)
		if err == nil {
			nc.Close()
		}
	}

	w := connectNATS(t, s, "worker", natsEnv[natsUsers["worker"]])
	pub := connectNATS(t, s, "publisher", natsEnv[natsUsers["publisher"]])
	ctx := t.Context()

	// The worker creates its streams and its consumer, as it does at start.
	stream := wcfg.NATS.JetStream.Stream
	intakeStream, _, err := jetstream.EnsureStream(ctx, w.js, jetstream.StreamSpec{Name: stream, Subjects: []string{wcfg.NATS.JetStream.Subject}})
	if err != nil {
		t.Fatalf("worker: intake stream: %v", err)
	}
	if _, _, err := jetstream.EnsureStream(ctx, w.js, jetstream.StreamSpec{Name: wcfg.NATS.EventsStream, Subjects: []string{wcfg.NATS.EventsPrefix + ".>"}}); err != nil {
		t.Fatalf("worker: events stream: %v", err)
	}
	cons, err := w.js.CreateOrUpdateConsumer(ctx, stream, natsjs.ConsumerConfig{
		Durable:       wcfg.NATS.JetStream.Durable,
		FilterSubject: wcfg.NATS.JetStream.Subject,
		AckPolicy:     natsjs.AckExplicitPolicy,
		DeliverPolicy: natsjs.DeliverAllPolicy,
	})
	if err != nil {
		t.Fatalf("worker: create consumer: %v", err)
	}
	if _, err := cons.Info(ctx); err != nil {
		t.Errorf("worker: consumer info: %v", err)
	}
	// And the stream of its consumers' max-delivery advisories, with the
	// consumer that reads them (it reads a dead letter's message back with
	// STREAM.MSG.GET, as below).
	if _, err := jetstream.EnsureDeadLetters(ctx, w.js, wcfg.NATS.JetStream); err != nil {
		t.Fatalf("worker: dead letters: %v", err)
	}

	// The publisher: `starter publish` looks the stream up, then publishes
	// each message with a message ID, expecting the stream.
	subject, err := jetstream.PublishSubject(scfg.NATS.JetStream.Subject, "order.placed")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.js.Stream(ctx, scfg.NATS.JetStream.Stream); err != nil {
		t.Errorf("publisher: stream %s: %v", scfg.NATS.JetStream.Stream, err)
	}
	body := []byte(`{"id": "evt_nats1", "type": "order.placed", "data": {"order_id": 1}}`)
	ack, err := pub.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: body},
		natsjs.WithMsgID("evt_nats1"), natsjs.WithExpectStream(scfg.NATS.JetStream.Stream))
	if err != nil {
		t.Fatalf("publisher: publish to %s: %v", subject, err)
	}
	if ack.Stream != stream {
		t.Errorf("publisher: %s stored in stream %s, want %s", subject, ack.Stream, stream)
	}

	// The publisher may do nothing else.
	pub.refusedPublish(t, wcfg.NATS.EventsPrefix+".order.paid")
	pub.refusedRequest(t, "create a stream", "$JS.API.STREAM.CREATE.", func(ctx context.Context) error {
		_, err := pub.js.CreateStream(ctx, natsjs.StreamConfig{Name: "ROGUE", Subjects: []string{"rogue.>"}})
		return err
	})
	if _, err := w.js.Stream(ctx, "ROGUE"); !errors.Is(err, natsjs.ErrStreamNotFound) {
		t.Errorf("stream ROGUE: %v, want not found", err)
	}
	pub.refusedRequest(t, "create a consumer on the intake stream (and read its messages)", "$JS.API.CONSUMER.CREATE.", func(ctx context.Context) error {
		_, err := pub.js.CreateOrUpdateConsumer(ctx, stream, natsjs.ConsumerConfig{Durable: "rogue", AckPolicy: natsjs.AckExplicitPolicy})
		return err
	})
	pub.refusedRequest(t, "look up the worker's consumer", "$JS.API.CONSUMER.INFO.", func(ctx context.Context) error {
		_, err := pub.js.Consumer(ctx, stream, wcfg.NATS.JetStream.Durable)
		return err
	})
	if m, err := intakeStream.GetMsg(ctx, 1); err != nil {
		t.Fatalf("worker: get message 1: %v", err)
	} else if !bytes.Equal(m.Data, body) {
		t.Fatalf("worker: message 1 is %q", m.Data)
	}
	if pubStream, err := pub.js.Stream(ctx, stream); err == nil {
		pub.refusedRequest(t, "read a message of the intake stream", "$JS.API.STREAM.MSG.GET.", func(ctx context.Context) error {
			_, err := pubStream.GetMsg(ctx, 1)
			return err
		})
	}

	// The worker consumes and acks (the ack confirmed by the server).
	batch, err := cons.Fetch(1, natsjs.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatalf("worker: fetch: %v", err)
	}
	var got int
	for m := range batch.Messages() {
		got++
		if !bytes.Equal(m.Data(), body) {
			t.Errorf("worker: fetched %q", m.Data())
		}
		if err := m.DoubleAck(ctx); err != nil {
			t.Errorf("worker: ack: %v", err)
		}
	}
	if err := batch.Error(); err != nil || got != 1 {
		t.Fatalf("worker: fetched %d messages (%v), want 1", got, err)
	}
	if ci, err := cons.Info(ctx); err != nil || ci.AckFloor.Consumer != 1 || ci.NumAckPending != 0 {
		t.Errorf("worker: after the ack the consumer is %+v (%v)", ci, err)
	}

	// The worker publishes events, as the outbox relay does.
	event := wcfg.NATS.EventsPrefix + ".order.paid"
	if _, err := w.js.PublishMsg(ctx, &nats.Msg{Subject: event, Data: []byte(`{}`)},
		natsjs.WithMsgID("evt_nats1/order.paid"), natsjs.WithExpectStream(wcfg.NATS.EventsStream)); err != nil {
		t.Errorf("worker: publish %s: %v", event, err)
	}
	// A message whose last delivery no worker settled: the server's
	// max-delivery advisory reaches the dead-letter stream under this
	// account, and the worker reads it there, and the message back.
	deadLetterAs(ctx, t, w, wcfg.NATS.JetStream, body)
	// It retires a route's consumer (NATS_CONSUMER_PER_ROUTE turned off):
	// it creates one, and deletes it.
	route := wcfg.NATS.JetStream.Durable + "-order-placed"
	if _, err := w.js.CreateOrUpdateConsumer(ctx, stream, natsjs.ConsumerConfig{Durable: route, FilterSubject: subject, AckPolicy: natsjs.AckExplicitPolicy}); err != nil {
		t.Errorf("worker: create a route's consumer: %v", err)
	} else if err := w.js.DeleteConsumer(ctx, stream, route); err != nil {
		t.Errorf("worker: retire a route's consumer: %v", err)
	}
	// But it neither publishes intake messages nor destroys a stream.
	w.refusedPublish(t, subject)
	w.refusedRequest(t, "delete the intake stream", "$JS.API.STREAM.DELETE.", func(ctx context.Context) error {
		return w.js.DeleteStream(ctx, stream)
	})
	w.refusedRequest(t, "purge the intake stream", "$JS.API.STREAM.PURGE.", func(ctx context.Context) error {
		return intakeStream.Purge(ctx)
	})
	if si, err := intakeStream.Info(ctx); err != nil || si.State.Msgs != 1 {
		t.Errorf("intake stream after the refused delete and purge: %+v (%v), want its 1 message", si, err)
	}

	// Monitoring listens on loopback only (the compose health check runs
	// inside the container; nothing else reaches it).
	var varz struct {
		HTTPHost string `json:"http_host"`
	}
	resp, err := http.Get(s.monitor + "/varz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&varz); err != nil {
		t.Fatal(err)
	}
	if varz.HTTPHost != "127.0.0.1" {
		t.Errorf("%s: monitoring listens on %q, want 127.0.0.1", natsConf, varz.HTTPHost)
	}
}

// deadLetterAs plays a worker, c, that held the intake stream's first
// message (body) past its one delivery on the durable "held", then reads
// the max-delivery advisory from the dead-letter stream with the durable
// the worker makes for it, and the message back, as jetstream.Consumer does.
func deadLetterAs(ctx context.Context, t *testing.T, c *natsClient, cfg jetstream.Config, body []byte) {
	t.Helper()
	cfg.Durable = "held"
	dead, err := jetstream.EnsureDeadLetters(ctx, c.js, cfg)
	if err != nil {
		t.Fatalf("worker: dead letters of %s: %v", cfg.Durable, err)
	}
	held, err := c.js.CreateOrUpdateConsumer(ctx, cfg.Stream, natsjs.ConsumerConfig{
		Durable: cfg.Durable, FilterSubject: cfg.Subject, AckPolicy: natsjs.AckExplicitPolicy,
		AckWait: time.Second, MaxDeliver: 1, DeliverPolicy: natsjs.DeliverAllPolicy,
	})
	if err != nil {
		t.Fatalf("worker: create consumer %s: %v", cfg.Durable, err)
	}
	defer func() { _ = c.js.DeleteConsumer(ctx, cfg.Stream, cfg.Durable) }()
	if b, err := held.Fetch(1, natsjs.FetchMaxWait(5*time.Second)); err != nil {
		t.Fatalf("worker: fetch from %s: %v", cfg.Durable, err)
	} else {
		for range b.Messages() { // held: neither acked nor nak'd
		}
	}
	time.Sleep(1100 * time.Millisecond)
	// A pull past the ack wait: the server gives up on the message.
	if _, err := held.Fetch(1, natsjs.FetchMaxWait(time.Second)); err != nil {
		t.Fatalf("worker: second fetch from %s: %v", cfg.Durable, err)
	}
	batch, err := dead.Fetch(1, natsjs.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatalf("worker: fetch a dead letter: %v", err)
	}
	var got int
	for adv := range batch.Messages() {
		got++
		var a struct {
			Stream    string `json:"stream"`
			StreamSeq uint64 `json:"stream_seq"`
		}
		if err := json.Unmarshal(adv.Data(), &a); err != nil || a.Stream != cfg.Stream {
			t.Fatalf("worker: advisory %s (%v), want one of stream %s", adv.Data(), err, cfg.Stream)
		}
		st, err := c.js.Stream(ctx, a.Stream)
		if err != nil {
			t.Fatalf("worker: stream %s: %v", a.Stream, err)
		}
		if m, err := st.GetMsg(ctx, a.StreamSeq); err != nil || !bytes.Equal(m.Data, body) {
			t.Fatalf("worker: the dead letter's message: %v", err)
		}
		if err := adv.DoubleAck(ctx); err != nil {
			t.Errorf("worker: ack the advisory: %v", err)
		}
	}
	if got != 1 {
		t.Fatalf("worker: %d advisories in the dead-letter stream (%v), want the held message's", got, batch.Error())
	}
}

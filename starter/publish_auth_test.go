package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"go.temporal.io/sdk/client"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/jetstream"
	"github.com/effectively/effectively/tools/natstest"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/tools/testenv"
)

// countingTemporal stands in for Temporal: it counts workflow starts.
type countingTemporal struct {
	client.Client
	mu      sync.Mutex
	started []string
}

func (f *countingTemporal) ExecuteWorkflow(_ context.Context, opts client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started = append(f.started, opts.ID)
	return nil, nil
}

func (f *countingTemporal) starts() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.started...)
}

// TestPublishAndIntakeOverTLSWithUsers runs a real nats-server that requires
// TLS and a user: the worker side (its own user, the CA, the stream it
// creates and its JetStream consumer, the intake path up to the workflow
// start) and `starter publish` (the publisher user with a password file)
// each connect with the NATS_* variables, and the message goes through.
func TestPublishAndIntakeOverTLSWithUsers(t *testing.T) {
	pki := natstest.NewPKI(t)
	const workerPW, publisherPW = "pw_worker_a41c", "pw_publisher_9e02"
	srv := natstest.Start(t, natstest.TLSBlock(pki, false)+fmt.Sprintf(
		"authorization {\n  users: [\n    {user: worker, password: %q}\n    {user: publisher, password: %q}\n  ]\n}\n", workerPW, publisherPW))
	natsURL := srv.URL("nats", "127.0.0.1")

	// The worker side, as connectBroker does it.
	wcfg, err := config.Load(func(name string) (string, bool) {
		v, ok := map[string]string{"NATS_URL": natsURL, "NATS_TLS_CA_FILE": pki.CA, "NATS_USER": "worker", "NATS_PASSWORD": workerPW}[name]
		return v, ok
	})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := wcfg.NATS.Connect("effectively-worker")
	if err != nil {
		t.Fatalf("worker connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	jsc := wcfg.NATS.JetStream
	if _, _, err := jetstream.EnsureStream(ctx, js, jetstream.StreamSpec{Name: jsc.Stream, Subjects: []string{jsc.Subject}, Duplicates: time.Minute}); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, storetest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	tc := &countingTemporal{}
	in, err := intake.New(store.New(pool), tc, intake.Config{Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := jetstream.NewConsumer(ctx, in, js, jsc)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cons.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("consumer: %v", err)
		}
	})

	// The starter, with its own user and a password file.
	pwFile := filepath.Join(t.TempDir(), "nats-password")
	if err := os.WriteFile(pwFile, []byte(publisherPW+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NATS_URL", natsURL)
	t.Setenv("NATS_TLS_CA_FILE", pki.CA)
	t.Setenv("NATS_USER", "publisher")
	t.Setenv("NATS_PASSWORD_FILE", pwFile)
	msg := `{"id": "evt_tls_1", "type": "order.placed", "data": {"order_id": 1, "amount": 1999, "currency": "usd", "customer_email": "ada@example.com", "payment_method": "pm_card_visa"}}`
	var stdout, stderr bytes.Buffer
	if code := run(ctx, []string{"publish", "-"}, strings.NewReader(msg+"\n"), &stdout, &stderr); code != exitOK {
		t.Fatalf("publish: exit code %d; stderr: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), `"status":"`+pubStored+`"`) {
		t.Fatalf("publish: %s", stdout.String())
	}
	if strings.Contains(stderr.String()+stdout.String(), publisherPW) {
		t.Errorf("the starter's output holds the password:\n%s%s", stdout.String(), stderr.String())
	}

	testenv.Eventually(t, 20*time.Second, "the published message starts its workflow and is acked", func() bool {
		if len(tc.starts()) != 1 {
			return false
		}
		c, err := js.Consumer(ctx, jsc.Stream, jsc.Durable)
		if err != nil {
			return false
		}
		ci, err := c.Info(ctx)
		return err == nil && ci.NumAckPending == 0 && ci.NumPending == 0 && ci.Delivered.Consumer == 1
	})

	// The publisher with a wrong password is refused, naming the variables.
	t.Setenv("NATS_PASSWORD_FILE", "")
	t.Setenv("NATS_PASSWORD", "wrong_pw_5c3a")
	stdout.Reset()
	stderr.Reset()
	if code := run(ctx, []string{"publish", "-"}, strings.NewReader(msg+"\n"), &stdout, &stderr); code != exitError ||
		!strings.Contains(stderr.String(), "Authorization Violation") || !strings.Contains(stderr.String(), "credential user") ||
		strings.Contains(stderr.String(), "wrong_pw_5c3a") {
		t.Errorf("publish with a wrong password: exit %d, stderr %s", code, stderr.String())
	}
}

// TestPublishRefusesConflictingNATSCredentials: two credentials at once is
// a bad configuration (exit 2), named, with no secret quoted.
func TestPublishRefusesConflictingNATSCredentials(t *testing.T) {
	t.Setenv("NATS_TOKEN", "tok_conflict_secret")
	t.Setenv("NATS_USER", "publisher")
	t.Setenv("NATS_PASSWORD", "pw_conflict_secret")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"publish", "-"}, strings.NewReader(""), &stdout, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), "NATS_USER/NATS_PASSWORD and NATS_TOKEN") || strings.Contains(stderr.String(), "secret") {
		t.Fatalf("exit %d, want %d naming NATS_USER/NATS_PASSWORD and NATS_TOKEN without their values: %s", code, exitUsage, stderr.String())
	}
}

// TestPublishBrokerFlag: --broker names the broker; one without its
// connection configured, or an unknown one, is a usage error (exit 2)
// naming it, before anything is read or connected.
func TestPublishBrokerFlag(t *testing.T) {
	for broker, want := range map[string]string{"rabbitmq": "needs RABBITMQ_URL", "kafka": "needs KAFKA_BROKERS", "sqs": `use nats, kafka or rabbitmq`} {
		code, err := cmdPublish(context.Background(), config.Config{}, []string{"--broker", broker, "-"}, strings.NewReader(""), io.Discard, io.Discard, slog.New(slog.DiscardHandler))
		if code != exitUsage || err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--broker %s: exit %d, %v; want %d and %q", broker, code, err, exitUsage, want)
		}
	}
}

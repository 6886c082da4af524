package soak

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/kafkatest"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/tools/workerproc"
)

var brokerRestarts = flag.Int("broker-restarts", 1, "SIGKILLs and restarts of the Kafka broker (TestSoakKafka)")

// TestSoakKafka is the chaos soak with Kafka as the only source (kfake as a
// separate process that persists, fsynced): worker SIGKILLs and SIGTERM
// restarts, a Postgres cut, and the broker SIGKILLed and restarted on the
// same port and data while messages flow. `make soak BROKER=kafka`.
func TestSoakKafka(t *testing.T) {
	ctx := context.Background()
	tsrv := testenv.StartTemporal(t)
	sims := testenv.StartSims(t)
	dbURL := storetest.NewDatabase(t)
	pool, err := store.Open(ctx, dbURL, store.PoolConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	bin, err := workerproc.Build(ctx, testenv.RepoRoot(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const queue, topic = "effectively-soak-kafka", "soak.messages"
	broker := kafkatest.StartProcess(t, 6, topic, "effectively.events.order.paid")
	// The producer retries through the broker's restart (kgo retries a
	// produce until its delivery timeout).
	prod := kafkatest.Producer(t, broker.Addr(), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.RecordDeliveryTimeout(60*time.Second))
	var sent atomic.Int64
	st := Stack{
		Temporal: tsrv.Client(), Pool: pool, Stripe: sims.Stripe, SendGrid: sims.SendGrid, WorkerBin: bin,
		Worker: workerproc.Config{
			DatabaseURL: dbURL, TemporalAddress: tsrv.FrontendHostPort(), TaskQueue: queue,
			StripeURL: sims.StripeURL, SendGridURL: sims.SendGridURL, // NATS off
			Extra: []string{
				"LOG_LEVEL=info",
				"KAFKA_BROKERS=" + broker.Addr(), "KAFKA_TOPIC=" + topic, "KAFKA_GROUP=soak",
				"OUTBOX_BROKER=kafka",
			},
		},
		Send: func(ctx context.Context, raw []byte) error {
			err := prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: raw}).FirstErr()
			if err == nil {
				sent.Add(1)
			}
			return err
		},
	}
	// The broker restarts once a third of the messages are on the topic,
	// while the workers record them.
	var restarted atomic.Int32
	rctx, stopRestarts := context.WithCancel(ctx)
	restartsDone := make(chan struct{})
	go func() {
		defer close(restartsDone)
		for i := range *brokerRestarts {
			threshold := int64(*messages) * int64(i+1) / int64(*brokerRestarts+2)
			for sent.Load() < threshold {
				select {
				case <-rctx.Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
			t.Logf("soak: SIGKILL and restart of the Kafka broker after %d sends", sent.Load())
			if err := broker.RestartErr(); err != nil {
				t.Errorf("broker restart: %v", err)
				return
			}
			restarted.Add(1)
		}
	}()
	rep, err := Run(ctx, Config{
		Messages: *messages, Workers: *workersN, Kills: *kills, Restarts: *restarts, Seed: *seed, Timeout: 15 * time.Minute, Settle: 120 * time.Second,
		Logf: t.Logf, Webhooks: *hooksOn, LostSendRatio: *lostSend,
	}, st)
	stopRestarts()
	<-restartsDone
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(os.Stdout, "soak report (kafka, %d broker restarts):\n%s", restarted.Load(), rep)
	if len(rep.Violations) > 0 {
		t.Errorf("the soak found %d violations:\n%s", len(rep.Violations), strings.Join(rep.Violations, "\n"))
	}
	if rep.DoubleCharges != 0 || rep.Lost != 0 {
		t.Errorf("%d double charges, %d lost; want 0 and 0", rep.DoubleCharges, rep.Lost)
	}
	if int(restarted.Load()) < *brokerRestarts || rep.Kills < *kills || rep.DatabaseCuts < 1 {
		t.Errorf("the chaos did not happen: %d broker restarts, %d kills, %d database cuts", restarted.Load(), rep.Kills, rep.DatabaseCuts)
	}
	var published int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE published_at IS NOT NULL`).Scan(&published); err != nil || published == 0 {
		t.Errorf("%d outbox events published to Kafka (%v); want the relay's events there", published, err)
	}
}

package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaBroker is kfake (franz-go's in-memory Kafka) in the bench's process,
// on a loopback port the worker connects to, with the run's topic and the
// relay's event topic. No real Kafka broker can be installed here: the
// figures are the worker's path on a Kafka protocol peer, not a Kafka
// cluster's.
type kafkaBroker struct {
	c     *kfake.Cluster
	addr  string
	cl    *kgo.Client
	topic string
}

func newKafkaBroker(ctx context.Context) (_ *kafkaBroker, err error) {
	b := &kafkaBroker{topic: "bench." + randomTag(5) + ".messages"}
	if b.c, err = kfake.NewCluster(kfake.NumBrokers(1)); err != nil {
		return nil, fmt.Errorf("start kfake: %w", err)
	}
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	b.addr = b.c.ListenAddrs()[0]
	if b.cl, err = kgo.NewClient(kgo.SeedBrokers(b.addr), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.MaxBufferedRecords(100_000)); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	adm := kadm.NewClient(b.cl)
	for _, t := range []string{b.topic, "effectively.events.order.paid"} {
		res, err := adm.CreateTopic(cctx, 6, 1, nil, t)
		if err == nil {
			err = res.Err
		}
		if err != nil {
			return nil, fmt.Errorf("create topic %s: %w", t, err)
		}
	}
	return b, nil
}

func (b *kafkaBroker) Name() string    { return "kafka" }
func (b *kafkaBroker) Version() string { return "kfake (franz-go, in process), 1 broker, 6 partitions" }
func (b *kafkaBroker) NATSURL() string { return "off" }

func (b *kafkaBroker) WorkerEnv() []string {
	return []string{
		"EFFECTIVELY_SOURCES=kafka", "KAFKA_BROKERS=" + b.addr, "KAFKA_TOPIC=" + b.topic, "KAFKA_GROUP=bench",
		"OUTBOX_BROKER=kafka",
	}
}

// Publish produces raw and waits for the broker; Kafka has no publish
// dedup, so dedupID is the record key only.
func (b *kafkaBroker) Publish(ctx context.Context, raw []byte, dedupID string) error {
	r := &kgo.Record{Topic: b.topic, Value: raw}
	if dedupID != "" {
		r.Key = []byte(dedupID)
	}
	return b.cl.ProduceSync(ctx, r).FirstErr()
}

func (b *kafkaBroker) PublishBurst(ctx context.Context, raws [][]byte) error {
	rs := make([]*kgo.Record, len(raws))
	for i, raw := range raws {
		rs[i] = &kgo.Record{Topic: b.topic, Value: raw}
	}
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return b.cl.ProduceSync(cctx, rs...).FirstErr()
}

// Subscribed reports whether the worker's group has a member.
func (b *kafkaBroker) Subscribed(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	gs, err := kadm.NewClient(b.cl).DescribeGroups(cctx, "bench")
	if err != nil {
		return false
	}
	g, ok := gs["bench"]
	return ok && g.State == "Stable" && len(g.Members) > 0
}

func (b *kafkaBroker) Close() {
	if b.cl != nil {
		b.cl.Close()
	}
	if b.c != nil {
		b.c.Close()
	}
}

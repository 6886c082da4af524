package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively/effectively/tools/kafkatest"
)

// `starter publish --broker kafka` produces every line, copies included
// (Kafka drops none), keyed by the message ID, and says so.
func TestPublishToKafka(t *testing.T) {
	_, addr := kafkatest.NewCluster(t)
	kafkatest.CreateTopic(t, addr, "pub.messages", 2, nil)
	t.Setenv("KAFKA_BROKERS", addr)
	t.Setenv("KAFKA_TOPIC", "pub.messages")
	valid := `{"id": "evt_kpub1", "type": "order.placed", "data": {"order_id": 1, "amount": 1999, "currency": "usd", "customer_email": "ada@example.com", "payment_method": "pm_card_visa"}}`
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"publish", "--broker", "kafka", "-"}, strings.NewReader(valid+"\n"+valid+"\n{\"id\": 7}\n"), &stdout, &stderr)
	if code != exitInvalid {
		t.Fatalf("exit code %d, want %d; stderr: %s", code, exitInvalid, stderr.String())
	}
	var results []publishResult
	dec := json.NewDecoder(&stdout)
	for dec.More() {
		var r publishResult
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		results = append(results, r)
	}
	if len(results) != 3 || results[0].Status != pubStored || results[1].Status != pubStored || results[2].Invalid == "" {
		t.Fatalf("results %+v: want both copies stored and the invalid line published with its error", results)
	}
	if results[0].Partition != results[1].Partition || results[0].Offset == results[1].Offset {
		t.Errorf("copies at %d@%d and %d@%d: want one partition (keyed by message ID), two records",
			results[0].Partition, results[0].Offset, results[1].Partition, results[1].Offset)
	}
	if !strings.Contains(stderr.String(), "3 stored") {
		t.Errorf("summary: %s", stderr.String())
	}
	cl := kafkatest.Producer(t, addr, kgo.ConsumeTopics("pub.messages"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var keys []string
	for len(keys) < 3 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { keys = append(keys, string(r.Key)) })
	}
	if strings.Count(strings.Join(keys, ","), "evt_kpub1") != 2 {
		t.Errorf("record keys %q, want evt_kpub1 twice", keys)
	}
}

func TestPublishKafkaRefusals(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		args []string
		want string // exit-usage error part
	}{
		{map[string]string{"KAFKA_BROKERS": "off"}, []string{"publish", "--broker", "kafka", "-"}, "needs KAFKA_BROKERS"},
		{nil, []string{"publish", "--broker=amqp", "-"}, `--broker "amqp": use nats, kafka or rabbitmq`},
	} {
		for k, v := range tt.env {
			t.Setenv(k, v)
		}
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), tt.args, strings.NewReader(""), &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tt.args, code, stderr.String(), exitUsage, tt.want)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/effectively/effectively/internal/intake/rabbitmq"
	"github.com/effectively/effectively/tools/rabbittest"
)

// TestPublishRabbitMQ: `publish --broker rabbitmq` puts every line on the
// exchange with its type as routing key and its ID as message_id; copies
// are not dropped (RabbitMQ has no publish dedup); before the worker
// declared the exchange and queue, the first message fails the run.
func TestPublishRabbitMQ(t *testing.T) {
	cfg := rabbittest.Config(t, rabbittest.URL())
	t.Setenv("RABBITMQ_URL", cfg.URL)
	t.Setenv("RABBITMQ_EXCHANGE", cfg.Exchange)
	t.Setenv("RABBITMQ_QUEUE", cfg.Queue)
	valid := `{"id": "evt_rmq1", "type": "order.placed", "data": {"order_id": 1, "amount": 1999, "currency": "usd", "customer_email": "ada@example.com", "payment_method": "pm_card_visa"}}`
	input := valid + "\n" + valid + "\n{\"id\": 7}\n"

	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"publish", "--broker", "rabbitmq", "-"}, strings.NewReader(input), &stdout, &stderr); code != exitError ||
		!strings.Contains(stderr.String(), "the worker declares it") {
		t.Fatalf("before the exchange exists: exit %d, want %d; stderr: %s", code, exitError, stderr.String())
	}
	// The exchange without a queue bound: confirmed, but returned.
	if err := rabbittest.Channel(t, cfg.URL).ExchangeDeclare(cfg.Exchange, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if code := run(context.Background(), []string{"publish", "--broker", "rabbitmq", "-"}, strings.NewReader(input), &stdout, &stderr); code != exitError ||
		!strings.Contains(stderr.String(), "returned by the broker") {
		t.Fatalf("no queue bound: exit %d, want %d naming the return; stderr: %s", code, exitError, stderr.String())
	}

	ch := rabbittest.Channel(t, cfg.URL)
	if err := rabbitmq.Declare(ch, cfg); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	stderr.Reset()
	if code := run(context.Background(), []string{"publish", "--broker", "rabbitmq", "-"}, strings.NewReader(input), &stdout, &stderr); code != exitInvalid {
		t.Fatalf("exit %d, want %d (one invalid line); stderr: %s", code, exitInvalid, stderr.String())
	}
	if n := strings.Count(stdout.String(), `"status":"published"`); n != 3 {
		t.Fatalf("%d published lines, want 3:\n%s", n, stdout.String())
	}
	var got []string
	for range 3 {
		d, ok, err := ch.Get(cfg.Queue, true)
		if err != nil || !ok {
			t.Fatalf("get: %v %v (have %v)", ok, err, got)
		}
		got = append(got, d.MessageId+"/"+d.RoutingKey)
	}
	if strings.Join(got, ",") != "evt_rmq1/order.placed,evt_rmq1/order.placed,/invalid" {
		t.Fatalf("queue holds %v", got)
	}
	if code := run(context.Background(), []string{"publish", "--broker", "kafka", "-"}, strings.NewReader(""), &stdout, &stderr); code != exitUsage {
		t.Fatalf("--broker kafka: exit %d, want usage", code)
	}
}

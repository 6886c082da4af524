package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"
)

// EnvBroker picks the broker `make run` publishes to: unset or `nats`
// (JetStream at 127.0.0.1:4222 when one answers), `kafka` (kfake, an
// in-memory Kafka, started as a process of the stack) or `rabbitmq` (the
// local server).
const EnvBroker = "BROKER"

// kafka starts kfakeserver on 127.0.0.1:9092 (or a free port), persisting
// in the state directory (emptied unless fresh is false), and returns the
// worker's Kafka settings: the dev topic, the dev group, the relay to Kafka
// and NATS off.
func (s *stack) kafka(ctx context.Context, fresh bool) ([]string, error) {
	bin := filepath.Join(s.state, "bin", "kfakeserver")
	if err := s.goCmd(ctx, "build", "-o", bin, "./tools/kafkatest/kfakeserver"); err != nil {
		return nil, fmt.Errorf("build kfakeserver: %w", err)
	}
	dir := filepath.Join(s.state, "kafka")
	if fresh {
		_ = os.RemoveAll(dir)
	}
	addr, err := freeAddr("127.0.0.1:9092")
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	topic := "effectively-" + s.instance + ".messages"
	events := "effectively-" + s.instance + ".events"
	// The relay's topic exists beforehand, as on a cluster that creates
	// no topic on demand.
	if _, err := s.spawn("kfake", os.Environ(), bin, "-port", port, "-data-dir", dir, "-sync", "-topics", topic+","+events+".order.paid"); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
		if err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("kfake at %s: %w (logs/kfake.log)", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	step(s.out, "using Kafka (kfake, an in-memory Kafka persisting in %s) at %s, topic %s", dir, addr, topic)
	return []string{
		"NATS_URL=off", "EFFECTIVELY_SOURCES=kafka", "KAFKA_BROKERS=" + addr, "KAFKA_TOPIC=" + topic, "KAFKA_GROUP=devstack",
		"OUTBOX_BROKER=kafka", "KAFKA_EVENTS_PREFIX=" + events,
	}, nil
}

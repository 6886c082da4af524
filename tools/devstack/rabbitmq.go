package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/effectively/effectively/internal/intake/rabbitmq"
)

// rabbitBroker returns the worker's settings for devstack's own queue on
// the RabbitMQ server at $RABBITMQ_URL (default the local one, guest/guest):
// the rabbitmq source alone, NATS off, so that the outbox relay publishes
// to RabbitMQ too. fresh deletes the queues of an earlier run.
func (s *stack) rabbitBroker(fresh bool) ([]string, error) {
	url := os.Getenv("RABBITMQ_URL")
	if url == "" {
		url = rabbitmq.DefaultURL
	}
	conn, err := rabbitmq.Dial(url, "effectively devstack")
	if err != nil {
		return nil, fmt.Errorf("%s=rabbitmq: %w (start it with `rabbitmq-server -detached`)", EnvBroker, err)
	}
	defer func() { _ = rabbitmq.CloseConn(conn) }()
	name := "effectively-" + strings.ToLower(s.instance)
	queue, events := name+".messages", name+".events"
	if fresh {
		// Absent on a first run: each delete fails alone.
		err := rabbitmq.Remove(context.Background(), conn, []string{queue, queue + ".dead", events}, nil)
		if err != nil {
			return nil, fmt.Errorf("%s=rabbitmq: deleting the queues of an earlier run: %w", EnvBroker, err)
		}
	}
	step(s.out, "using RabbitMQ at %s, queue %s (events in %s)", strings.SplitN(url, "@", 2)[len(strings.SplitN(url, "@", 2))-1], queue, events)
	return []string{
		"NATS_URL=off", "EFFECTIVELY_SOURCES=rabbitmq", "RABBITMQ_URL=" + url,
		"RABBITMQ_EXCHANGE=" + name + ".messages", "RABBITMQ_QUEUE=" + queue,
		"RABBITMQ_EVENTS_EXCHANGE=" + events, "RABBITMQ_EVENTS_QUEUE=" + events,
	}, nil
}

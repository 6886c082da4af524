package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/jetstream"
	"github.com/effectively/effectively/internal/intake/kafka"
	"github.com/effectively/effectively/internal/intake/rabbitmq"
)

// buildSources builds the sources EFFECTIVELY_SOURCES names, in its order;
// nothing is fetched before main runs them. A new kind of source adds its
// case here (docs/sources.md).
func buildSources(ctx context.Context, cfg config.Config, in *intake.Intake, b *broker, m *metrics.Metrics, logger *slog.Logger) ([]intake.Source, error) {
	var sources []intake.Source
	for _, kind := range cfg.Sources {
		switch kind {
		case config.SourceJetStream:
			if b == nil {
				return nil, fmt.Errorf("%w: %s=%s needs NATS_URL", errBadConfig, config.EnvSources, kind)
			}
			jsCfg := cfg.NATS.JetStream
			jsCfg.Name, jsCfg.Logger, jsCfg.Metrics = config.SourceJetStream, logger, m
			if cfg.NATS.PerRoute {
				routed, err := routeConsumers(ctx, in, b, jsCfg, cfg.NATS.RouteWait)
				if err != nil {
					return nil, err
				}
				for _, c := range routed {
					sources = append(sources, c)
					jsCfg.Skip = append(jsCfg.Skip, c.Subject())
				}
			} else {
				left, err := retiringConsumers(ctx, in, b, jsCfg, logger)
				if err != nil {
					return nil, err
				}
				sources = append(sources, left...)
			}
			c, err := jetstream.NewConsumer(ctx, in, b.js, jsCfg)
			if err != nil {
				return nil, err
			}
			sources = append(sources, c)
		case config.SourceRabbitMQ:
			rcfg := cfg.RabbitMQ.Source
			rcfg.Name, rcfg.Logger, rcfg.Metrics = config.SourceRabbitMQ, logger, m
			c, err := rabbitmq.NewConsumer(in, rcfg)
			if err != nil {
				return nil, fmt.Errorf("%w: RABBITMQ_*: %w", errBadConfig, err)
			}
			sources = append(sources, c)
		case config.SourceKafka:
			kcfg := cfg.Kafka.Consumer
			kcfg.Name, kcfg.Logger, kcfg.Metrics = config.SourceKafka, logger, m
			c, err := kafka.NewConsumer(in, kcfg)
			if err != nil {
				return nil, err
			}
			sources = append(sources, c)
		default:
			// config.Validate refuses a kind this build does not run.
			return nil, fmt.Errorf("%w: %s: source %q is not built into this worker", errBadConfig, config.EnvSources, kind)
		}
	}
	return sources, nil
}

// routeConsumers are the durable consumers of NATS_CONSUMER_PER_ROUTE, one
// per route: NATS_CONSUMER-<consumer> on the route's subject, starting
// after NATS_CONSUMER's ack floor when created; with wait
// (NATS_ROUTE_BACKLOG_WAITS) a route's backlog waits in its consumer.
func routeConsumers(ctx context.Context, in *intake.Intake, b *broker, all jetstream.Config, wait bool) ([]*jetstream.Consumer, error) {
	var out []*jetstream.Consumer
	for _, r := range in.Routes().Routes() {
		subject, err := jetstream.PublishSubject(cmp.Or(all.Subject, jetstream.DefaultSubject), r.Type)
		if err != nil || subject == all.Subject {
			return nil, fmt.Errorf("%w: NATS_CONSUMER_PER_ROUTE needs a NATS_SUBJECT ending in .> (one subject per type): %q", errBadConfig, all.Subject)
		}
		rc := all
		rc.Name = config.SourceJetStream + "-" + r.Consumer
		rc.Durable = cmp.Or(all.Durable, jetstream.DefaultDurable) + "-" + r.Consumer
		rc.Subject, rc.StartAfter, rc.Skip = subject, cmp.Or(all.Durable, jetstream.DefaultDurable), nil
		rc.OneRoute = wait
		c, err := jetstream.NewConsumer(ctx, in, b.js, rc)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// retiringConsumers are the route consumers a run with
// NATS_CONSUMER_PER_ROUTE left on the stream, now that it is off: each
// records what the shared consumer skipped and is deleted once no worker
// with the setting on is left (jetstream.Retiring).
func retiringConsumers(ctx context.Context, in *intake.Intake, b *broker, shared jetstream.Config, logger *slog.Logger) ([]intake.Source, error) {
	left, err := jetstream.Leftovers(ctx, b.js, shared)
	if err != nil {
		// A broker that refuses to list its consumers (an account without
		// the permission) must not stop a worker that never used the
		// setting; one that did is told what it risks.
		logger.Warn("could not look for route consumers left by NATS_CONSUMER_PER_ROUTE; if it was ever on, what they hold is not recorded until a worker can", "error", err.Error())
		return nil, nil
	}
	var out []intake.Source
	for _, rc := range left {
		r, err := jetstream.NewRetiring(ctx, in, b.js, rc)
		if errors.Is(err, natsjs.ErrConsumerNotFound) {
			continue // another worker deleted it meanwhile
		}
		if err != nil {
			return nil, err
		}
		logger.Info("NATS_CONSUMER_PER_ROUTE is off and a route's consumer is left: this worker records what it holds, then deletes it", "consumer", rc.Durable)
		out = append(out, r)
	}
	return out, nil
}

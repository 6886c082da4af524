package deploy

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/intake/kafka"
)

// TestComposeKafka: the kafka service runs KRaft (broker and controller in
// one node, no ZooKeeper), advertises the listener the containers use under
// its service name and the published one on 127.0.0.1, creates no topic on
// demand, and kafka-setup creates the topic the worker consumes with a
// bounded life the worker accepts (kafka.TopicLife.Horizon) within its
// RETENTION.
func TestComposeKafka(t *testing.T) {
	p := load(t)
	k := p.Services["kafka"]
	env := map[string]string{}
	for key, v := range k.Environment {
		if v != nil {
			env[key] = *v
		}
	}
	if !strings.Contains(env["KAFKA_PROCESS_ROLES"], "controller") || !strings.Contains(env["KAFKA_PROCESS_ROLES"], "broker") ||
		env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == "" {
		t.Errorf("kafka is not one KRaft node (broker and controller): %v", env)
	}
	if _, zk := env["KAFKA_ZOOKEEPER_CONNECT"]; zk {
		t.Error("kafka names ZooKeeper; it runs in KRaft mode")
	}
	if env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] != "false" {
		t.Error("kafka creates topics on demand: a misspelt topic would get the broker's defaults instead of an error")
	}
	adv := env["KAFKA_ADVERTISED_LISTENERS"]
	if !strings.Contains(adv, "//kafka:29092") || !strings.Contains(adv, "//127.0.0.1:9092") {
		t.Errorf("KAFKA_ADVERTISED_LISTENERS=%q: want kafka:29092 for the containers and 127.0.0.1:9092 for the host", adv)
	}

	for _, name := range []string{"worker", "starter"} {
		e := p.Services[name].Environment
		cfg, err := config.Load(func(key string) (string, bool) {
			v, ok := e[key]
			if !ok || v == nil {
				return "", false
			}
			return *v, true
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if name == "worker" && !cfg.HasSource(config.SourceKafka) {
			t.Errorf("the worker's EFFECTIVELY_SOURCES=%v does not run the kafka source", cfg.Sources)
		}
		if len(cfg.Kafka.Brokers) != 1 || cfg.Kafka.Brokers[0] != "kafka:29092" {
			t.Errorf("%s: KAFKA_BROKERS=%v, want the kafka service's internal listener kafka:29092", name, cfg.Kafka.Brokers)
		}
		setup := strings.Join(p.Services["kafka-setup"].Command, " ")
		topic := cfg.Kafka.Consumer.Topic
		if !strings.Contains(setup, "--topic "+topic+" ") || !strings.Contains(setup, "--if-not-exists") {
			t.Errorf("kafka-setup does not create %s's topic %s: %s", name, topic, setup)
			continue
		}
		life := kafka.TopicLife{CleanupPolicy: flagValue(setup, "cleanup.policy")}
		if life.Retention, err = msDuration(flagValue(setup, "retention.ms")); err == nil {
			life.Segment, err = msDuration(flagValue(setup, "segment.ms"))
		}
		if err != nil {
			t.Fatalf("kafka-setup's topic configs: %v", err)
		}
		h, err := life.Horizon()
		if err != nil {
			t.Errorf("the worker would refuse kafka-setup's topic: %v", err)
		} else if h >= cfg.Retention {
			t.Errorf("topic horizon %s is not within RETENTION %s: the worker would refuse to start", h, cfg.Retention)
		}
	}
}

// flagValue returns the value of "--config key=value" in cmd.
func flagValue(cmd, key string) string {
	_, rest, ok := strings.Cut(cmd, "--config "+key+"=")
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, " ")
	return v
}

// msDuration parses a number of milliseconds.
func msDuration(v string) (time.Duration, error) {
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number of milliseconds", v)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/kafka"
	"github.com/effectively/effectively/tools/kafkatest"
	"github.com/effectively/effectively/tools/sourcetest"
	"github.com/effectively/effectively/tools/testenv"
)

// TestConformance runs the source conformance suite against Kafka, on an
// in-process kfake of its own per case that persists to disk, so that it
// can be closed and started again on the same port and data
// (TestBrokerRestart SIGKILLs a separate kfake process instead).
func TestConformance(t *testing.T) { sourcetest.Run(t, kafkaHarness{}) }

type kafkaHarness struct{}

func (kafkaHarness) Name() string { return "kafka" }

func (kafkaHarness) NA(c sourcetest.Case) string {
	switch c {
	case sourcetest.CaseMaxAttempts, sourcetest.CaseOutagePastLimit, sourcetest.CaseDeadLetter:
		return "Kafka keeps no delivery count: a record the inbox refuses stalls its partition until it is recorded (postgres_down), it is never given up on"
	case sourcetest.CaseOrdering:
		return "Kafka orders each partition, and the commit keeps that order (never past an unrecorded record), but a batch's records are recorded concurrently (group commit), so the inbox does not keep it; the product does not promise it"
	case sourcetest.CaseCopies, sourcetest.CaseLostAck, sourcetest.CaseCrashAfterCommit, sourcetest.CaseCrashBeforeCommit,
		sourcetest.CasePostgresDown, sourcetest.CaseBrokerRestart, sourcetest.CaseOversized, sourcetest.CaseTwoWorkers,
		sourcetest.CaseHandover:
	}
	return ""
}

const confTopic = "conf"

func (kafkaHarness) NewSubscription(t testing.TB, _ sourcetest.SubscriptionOptions) sourcetest.Subscription {
	t.Helper()
	s := &kafkaSub{dir: t.TempDir(), group: "conf-workers"}
	s.start(t, 0)
	kafkatest.CreateTopic(t, s.addr, confTopic, 4, nil)
	s.prod = kafkatest.Producer(t, s.addr, kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.RecordDeliveryTimeout(5*time.Second))
	s.adm = kafkatest.Admin(t, s.addr)
	t.Cleanup(func() { s.cluster().Close() })
	return s
}

// kafkaSub is one case's broker, topic and group.
type kafkaSub struct {
	dir, group string
	addr       string
	port       int
	prod       *kgo.Client
	adm        *kadm.Client
	mu         sync.Mutex
	c          *kfake.Cluster
	workers    []*kafkaWorker
}

func (s *kafkaSub) cluster() *kfake.Cluster {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c
}

// start starts kfake on port (0: a free one) with the case's data, and the
// fault that refuses the offset commits of lossy and crashed workers.
func (s *kafkaSub) start(t testing.TB, port int) {
	t.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.DataDir(s.dir), kfake.SyncWrites()}
	if port != 0 {
		opts = append(opts, kfake.Ports(port))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	// A commit refused with an error kgo neither retries nor takes for a
	// fenced member: the worker's settle never reaches the broker while
	// its connection stays up.
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Count: -1, Err: kerr.OffsetMetadataTooLarge,
		When: func(req kmsg.Request) bool {
			r, ok := req.(*kmsg.OffsetCommitRequest)
			return ok && s.refuses(r.MemberID)
		}})
	s.mu.Lock()
	s.c = c
	s.mu.Unlock()
	if s.addr == "" {
		s.addr = c.ListenAddrs()[0]
		_, p, _ := strings.Cut(s.addr, ":")
		_, _ = fmt.Sscan(p, &s.port)
	}
}

// refuses reports whether the commits of member are to be refused.
func (s *kafkaSub) refuses(member string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.workers {
		if id, _ := w.Client().GroupMetadata(); id == member && (w.lossy || w.crashed.Load()) {
			return true
		}
	}
	return false
}

// Publish produces raw once the running workers are all members of the
// group (a worker joins at its first poll, and a join takes a rebalance:
// without the wait, a worker started a moment before may find nothing left).
func (s *kafkaSub) Publish(_ testing.TB, raw []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.waitJoined(ctx)
	return s.prod.ProduceSync(ctx, &kgo.Record{Topic: confTopic, Value: raw}).FirstErr()
}

func (s *kafkaSub) NewWorker(t testing.TB, in *intake.Intake, o sourcetest.WorkerOptions) sourcetest.Worker {
	t.Helper()
	c, err := kafka.NewConsumer(in, kafka.Config{
		Brokers: []string{s.addr}, Topic: confTopic, Group: s.group, MaxPollRecords: 10,
		StallFirst: 100 * time.Millisecond, StallLongest: time.Second, Logger: testenv.Logger(t),
		ClientOpts: []kgo.Opt{kgo.AutoCommitInterval(200 * time.Millisecond)},
	})
	if err != nil {
		t.Fatal(err)
	}
	w := &kafkaWorker{Consumer: c, lossy: o.LoseSettles}
	s.mu.Lock()
	s.workers = append(s.workers, w)
	s.mu.Unlock()
	return w
}

// waitJoined waits until the group is stable with every running worker in
// it, or ctx ends.
func (s *kafkaSub) waitJoined(ctx context.Context) {
	for ctx.Err() == nil {
		s.mu.Lock()
		want := map[string]bool{}
		joined := true
		for _, w := range s.workers {
			if w.running.Load() && !w.crashed.Load() {
				id, _ := w.Client().GroupMetadata()
				joined = joined && id != ""
				want[id] = true
			}
		}
		s.mu.Unlock()
		if len(want) == 0 {
			return
		}
		if joined {
			gs, err := s.adm.DescribeGroups(ctx, s.group)
			if g, ok := gs[s.group]; err == nil && ok && g.State == "Stable" && len(g.Members) == len(want) {
				all := true
				for _, m := range g.Members {
					all = all && want[m.MemberID]
				}
				if all {
					return
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// RestartBroker closes kfake (its state written out) and starts it again
// on the same port with the same data.
func (s *kafkaSub) RestartBroker(t testing.TB) {
	t.Helper()
	s.cluster().Close()
	time.Sleep(200 * time.Millisecond) // the workers see the broker gone
	s.start(t, s.port)
}

// Unsettled is how many records the group has not committed past.
func (s *kafkaSub) Unsettled(testing.TB) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ends, err := s.adm.ListEndOffsets(ctx, confTopic)
	if err != nil {
		return -1
	}
	starts, err := s.adm.ListStartOffsets(ctx, confTopic)
	if err != nil {
		return -1
	}
	committed, err := s.adm.FetchOffsets(ctx, s.group)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return -1
	}
	n := 0
	ends.Each(func(o kadm.ListedOffset) {
		from := int64(0)
		if so, ok := starts.Lookup(confTopic, o.Partition); ok {
			from = so.Offset
		}
		if c, ok := committed.Lookup(confTopic, o.Partition); ok && c.At >= 0 {
			from = c.At
		}
		n += int(o.Offset - from)
	})
	return n
}

// kafkaWorker is a Consumer whose crash refuses its commits from then on
// and ends its Run: what the broker sees of a SIGKILL, but for the leave
// (the group rebalances at once rather than after the session timeout).
type kafkaWorker struct {
	*kafka.Consumer
	lossy   bool
	running atomic.Bool
	crashed atomic.Bool
	mu      sync.Mutex
	cancel  context.CancelFunc
}

func (w *kafkaWorker) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.mu.Lock()
	w.cancel = cancel
	w.mu.Unlock()
	w.running.Store(true)
	defer w.running.Store(false)
	return w.Consumer.Run(ctx)
}

func (w *kafkaWorker) Crash() {
	w.crashed.Store(true)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancel != nil {
		w.cancel()
	}
}

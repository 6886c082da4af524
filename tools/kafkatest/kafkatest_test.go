package kafkatest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/effectively/effectively/tools/kafkatest"
)

// The separate process keeps its log and a group's committed offsets across
// a SIGKILL and a restart on the same port: what the broker-restart tests
// rely on.
func TestProcessSurvivesSIGKILL(t *testing.T) {
	p := kafkatest.StartProcess(t, 1, "orders")
	prod := kafkatest.Producer(t, p.Addr())
	for i := range 10 {
		kafkatest.Produce(t, prod, &kgo.Record{Topic: "orders", Value: fmt.Appendf(nil, "m%d", i)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kafkatest.Admin(t, p.Addr())
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "orders", Partition: 0, At: 6, LeaderEpoch: -1})
	if err := adm.CommitAllOffsets(ctx, "g", offs); err != nil {
		t.Fatalf("commit: %v", err)
	}

	p.Restart(t) // SIGKILL, then the same port and data

	fetched, err := kafkatest.Admin(t, p.Addr()).FetchOffsets(ctx, "g")
	if err != nil {
		t.Fatalf("fetch offsets after restart: %v", err)
	}
	if o, ok := fetched.Lookup("orders", 0); !ok || o.At != 6 {
		t.Fatalf("committed offset after restart = %+v (found %v), want 6", o, ok)
	}
	cons := kafkatest.Producer(t, p.Addr(), kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var got []string
	for len(got) < 10 {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d records after restart, want 10: %v", len(got), got)
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if got[0] != "m0" || got[9] != "m9" {
		t.Fatalf("records after restart: %v", got)
	}
}

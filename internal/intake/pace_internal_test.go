package intake

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/tools/storetest"
)

// TestPaceIsSharedByTheWorkers: two workers' intakes on one database pace
// a route's starts together: in 2 s at 10/s they start about 20 in all,
// not 20 each (each paced alone, as before, they started 40); a worker
// whose Postgres does not answer paces itself alone.
func TestPaceIsSharedByTheWorkers(t *testing.T) {
	const perSecond, run = 10, 2 * time.Second
	pool := storetest.NewPool(t)
	var started atomic.Int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	for range 2 {
		in := &Intake{store: store.New(pool), cfg: Config{StartRate: perSecond}, pace: map[string]*pace{}}
		for range 4 { // starters
			wg.Go(func() {
				for in.awaitStart(ctx, "order-placed") == nil {
					started.Add(1)
				}
			})
		}
	}
	wg.Wait()
	if n := started.Load(); n > perSecond*2+3 || n < perSecond*2-5 {
		t.Fatalf("two workers started %d in %s at %d/s shared, want about %d", n, run, perSecond, perSecond*2)
	}

	p, err := newPace(down{}, "order-placed", perSecond)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	n := 0
	for p.wait(ctx) == nil {
		n++
	}
	if n < perSecond-2 || n > perSecond+1 {
		t.Fatalf("with Postgres down a worker started %d in 1s at %d/s, want about %d (its own pace)", n, perSecond, perSecond)
	}
}

// down is a pace backend that never answers.
type down struct{}

func (down) ReserveRate(context.Context, store.Reservation) (store.Reserved, error) {
	return store.Reserved{}, errors.New("connection refused")
}

func (down) PauseRate(context.Context, []string, time.Duration) error {
	return errors.New("connection refused")
}

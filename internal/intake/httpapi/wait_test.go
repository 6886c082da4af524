package httpapi_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/httpapi"
	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/tools/testenv"
)

// slowRuns starts workflows as FakeTemporal does; each run closes after
// closeAfter, its outcome recorded first, as the workflow's last step does.
type slowRuns struct {
	*testenv.FakeTemporal
	pool       *pgxpool.Pool
	closeAfter time.Duration
}

type slowRun struct {
	client.WorkflowRun
	s  *slowRuns
	id string
}

func (s *slowRuns) GetWorkflow(_ context.Context, id, _ string) client.WorkflowRun {
	return slowRun{s: s, id: id}
}

func (r slowRun) Get(ctx context.Context, _ any) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(r.s.closeAfter):
	}
	_, err := r.s.pool.Exec(context.Background(), `INSERT INTO processed_messages (consumer, message_id, outcome, order_id)
		VALUES ('order-placed', $1, 'paid', 4242) ON CONFLICT DO NOTHING`, strings.TrimPrefix(r.id, "order-placed/"))
	return err
}

// TestWaitLongerThanTheRecordGivesTheOutcome: a POST with Prefer: wait
// whose workflow closes after the request's record bound still answers
// the outcome with terminal: true; it was read on the record's context,
// expired by then, and left out.
func TestWaitLongerThanTheRecordGivesTheOutcome(t *testing.T) {
	defer httpapi.SetRecordTimeout(500 * time.Millisecond)()
	pool, err := store.Open(context.Background(), storetest.NewDatabase(t), store.PoolConfig{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	tc := &slowRuns{FakeTemporal: testenv.NewFakeTemporal(), pool: pool, closeAfter: 1500 * time.Millisecond}
	in, err := intake.New(store.New(pool), tc, intake.Config{TaskQueue: "q", Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(t.TempDir(), "tokens")
	writeTokens(t, tokens, "checkout "+httpapi.HashToken(checkoutToken)+" order.placed")
	api, err := httpapi.New(in, tc, nil, httpapi.Config{Addr: "127.0.0.1:0", TokensFile: tokens, MaxWait: 20 * time.Second, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := testenv.ServeAPI(t, api)
	e := &env{base: "http://" + addr, client: &http.Client{Timeout: 30 * time.Second}}
	a := e.post(t, "evt_wait_long", []byte(`{"type":"order.placed","data":{"order_id":4242,"amount":1999,"currency":"usd","customer_email":"ada@example.com","payment_method":"pm_card_visa"}}`),
		"Prefer", "wait=10")
	acc := a.accepted(t)
	if acc.Terminal == nil || !*acc.Terminal || acc.Outcome != "paid" {
		t.Fatalf("answer after a wait past the record's bound: terminal %v, outcome %q; want true and paid", acc.Terminal, acc.Outcome)
	}
}

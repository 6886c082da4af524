package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/leaf/codec"
	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/workflows"
)

// TestWorkerBinaryEncryptsPayloads runs the worker binary with
// EFFECTIVELY_CODEC_KEYS set and checks, through a client without the codec,
// that the history it wrote holds no customer data in plaintext.
func TestWorkerBinaryEncryptsPayloads(t *testing.T) {
	secret := make([]byte, codec.KeySize)
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	keys, err := codec.NewKeyring(codec.Key{ID: "bin-1", Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	s := newProcStack(t, codec.EnvKeys+"=bin-1:"+base64.StdEncoding.EncodeToString(secret))
	// The test's intake starts workflows with the same keys, as the starter
	// would with the same environment.
	dc := codec.NewDataConverter(keys)
	cc, err := client.Dial(client.Options{HostPort: s.temporal.FrontendHostPort(), DataConverter: dc, FailureConverter: codec.NewFailureConverter(dc), Logger: log.NewStructuredLogger(testenv.Logger(t))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Close)
	in, err := intake.New(s.store, cc, intake.Config{TaskQueue: s.cfg.TaskQueue, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	s.start(t)
	if r, err := in.Accept(context.Background(), order(piiMessageID, piiOrderID, "pm_card_visa"), "test"); err != nil || r.Status != intake.StatusStarted {
		t.Fatalf("accept = %+v, %v", r, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var st workflows.Status
	if err := cc.GetWorkflow(ctx, "order-placed/"+piiMessageID, "").Get(ctx, &st); err != nil || st.Outcome != workflows.OutcomeCompleted {
		t.Fatalf("outcome = %+v, %v", st, err)
	}
	h := scanHistory(t, s.client, "order-placed/"+piiMessageID) // s.client has no codec
	if len(h.plaintext) > 0 {
		t.Errorf("plaintext customer data in the history the worker binary wrote: %v", h.plaintext)
	}
	if len(h.encrypted) == 0 || len(h.unencrypted) > 0 {
		t.Errorf("payloads: %d encrypted, unencrypted %v", len(h.encrypted), h.unencrypted)
	}
}

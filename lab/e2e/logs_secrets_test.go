package e2e

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/tools/workerproc"
	"github.com/effectively/effectively/workflows"
)

// TestLogsCarryNoSecretsOrPersonalData runs the real worker at debug level
// with NATS credentials in every URL of a two-URL NATS_URL, the fake API
// keys, and a batch of messages with known emails: one paid, one quarantined
// for its email, one quarantined for its payment method. No log line, at any
// level, may hold an email, the NATS password or user, an API key or the bad
// payment method.
func TestLogsCarryNoSecretsOrPersonalData(t *testing.T) {
	const (
		natsUser     = "natsuser_7d3e"
		natsPassword = "s3cretpw_91ab"
		paidEmail    = "zelda.paid@customer-example.org"
		badEmail     = "Zelda Invalid <zelda.invalid@customer-example.org>"
		pmEmail      = "zelda.pm@customer-example.org"
		badPM        = "card_zelda_secret_pm"
	)
	// The local server has no accounts: it accepts the credentials and
	// ignores them, which is enough to see where the worker writes them.
	u, err := url.Parse(testenv.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(natsUser, natsPassword)
	natsURL := u.String() + "," + u.String()

	j := testenv.NewJetStream(t, testenv.JetStreamOptions{})
	s := newProcStack(t)
	s.cfg.NATSURL = natsURL
	s.cfg.Extra = append(s.cfg.Extra, brokerEnv(j)...)
	p := s.start(t) // LOG_LEVEL=debug, from workerproc.Env

	msg := func(id, email, pm string) []byte {
		return fmt.Appendf(nil, `{"id": %q, "type": "order.placed", "data": {"order_id": 4711, "amount": 1999, "currency": "usd", "customer_email": %q, "payment_method": %q}}`, id, email, pm)
	}
	j.Publish(t, msg("evt_logs_bad_email", badEmail, "pm_card_visa"), "")
	j.Publish(t, msg("evt_logs_bad_pm", pmEmail, badPM), "")
	j.Publish(t, msg("evt_logs_paid", paidEmail, "pm_card_visa"), "")

	if st := s.waitOutcome(t, "evt_logs_paid"); st.Outcome != workflows.OutcomeCompleted {
		t.Fatalf("outcome = %+v", st)
	}
	if n := s.sims.SendGrid.Stats().DeliveriesByKey["email:evt_logs_paid"]; n != 1 {
		t.Errorf("receipts = %d, want 1", n)
	}
	testenv.Eventually(t, 30*time.Second, "both bad messages quarantined", func() bool {
		var n int
		err := s.store.Pool().QueryRow(context.Background(),
			`SELECT count(*) FROM quarantine WHERE message_id IN ('evt_logs_bad_email', 'evt_logs_bad_pm')`).Scan(&n)
		return err == nil && n == 2
	})
	p.Stop(10 * time.Second) // the shutdown lines are checked too

	logs := p.Logs()
	// The check can fail: the lines that would carry the values are there.
	redacted := fmt.Sprintf(`"nats_url":"%s://REDACTED@%s,%[1]s://REDACTED@%[2]s"`, u.Scheme, u.Host)
	for _, want := range []string{redacted, "message quarantined", "data.customer_email", "data.payment_method"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the worker's logs lack %q; the check below would see nothing:\n%s", want, logs)
		}
	}
	forbidden := []string{
		paidEmail, "zelda.invalid", pmEmail, "customer-example", "Zelda Invalid", badPM, "zelda_secret",
		natsPassword, natsUser,
		workerproc.FakeStripeKey, workerproc.FakeSendGridKey, "SECRET_stripe", "SECRET_sendgrid",
	}
	lines := strings.Split(logs, "\n")
	for _, line := range lines {
		for _, f := range forbidden {
			if strings.Contains(line, f) {
				t.Errorf("a worker log line holds %q: %s", f, line)
			}
		}
	}
	t.Logf("%d log lines checked", len(lines))
}

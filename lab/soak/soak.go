// Package soak runs effectively under chaos and reconciles the result: many
// messages with a share of duplicates (some while their workflow runs, some
// long after it completed), several worker processes killed with SIGKILL and
// restarted at random, provider faults (5xx before and after the effect, lost
// responses, 429, slow answers) and Postgres connections cut. At the end it
// counts what the providers saw, what Postgres recorded and what Temporal
// ran, and reports every violation of the guarantees: a double charge, a lost
// message, a receipt repeated beyond the documented window.
package soak

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/effectively/effectively/internal/adapter/audit"
	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/leaf/identity"
	"github.com/effectively/effectively/sim/sendgridsim"
	"github.com/effectively/effectively/sim/stripesim"
	"github.com/effectively/effectively/tools/workerproc"
	"github.com/effectively/effectively/workflows"
)

// Config sizes a run. Zero fields take the defaults noted.
type Config struct {
	// Messages is how many messages are sent, duplicates included. Default 2000.
	Messages int
	// DuplicateRatio is the share of sends that repeat an earlier message.
	// Default 0.3.
	DuplicateRatio float64
	// Workers is how many worker processes run at once. Default 3.
	Workers int
	// Kills is how many times a random worker is killed with SIGKILL (and
	// started again). Default 3.
	Kills int
	// FaultRatio is the share of unique messages given a provider fault.
	// Default 0.1.
	FaultRatio float64
	// Restarts is how many times a worker is replaced as a deploy does it
	// (a new process starts, the old one gets SIGTERM and drains). Default
	// 0; negative means none.
	Restarts int
	// DatabaseCuts is how often every worker connection to Postgres is
	// terminated. Default 1.
	DatabaseCuts int
	// BrokerRestarts is how often the broker is restarted while messages
	// flow (Stack.RestartBroker). Default 0.
	BrokerRestarts int
	// Concurrency is how many sends are in flight. Default 16.
	Concurrency int
	// Seed makes the run repeatable. Default: the time.
	Seed uint64
	// Timeout bounds the whole run. Default 10m.
	Timeout time.Duration
	// Settle is how long, after the last send, every workflow has to
	// complete before the stragglers are reported. Default 3m.
	Settle time.Duration
	// Logf receives progress lines. Default: none.
	Logf func(format string, args ...any)
	// Webhooks makes the simulators deliver signed events, through a load
	// balancer, to the webhook listeners of the workers, and every worker
	// wait EMAIL_RESEND_GRACE before resending a receipt (see webhooks.go).
	// Default off.
	Webhooks bool
	// Outages run in their order during the sending phase, spread among
	// the kills, cuts and restarts: a Temporal service killed, Postgres
	// restarted (cluster_test.go). A failed outage is a violation.
	Outages []Outage
	// LostSendRatio is the share of receipts of each kind (order and
	// refund) whose first send SendGrid accepts with the answer lost, on
	// top of FaultRatio's faults. Default 0.1; negative means none.
	LostSendRatio float64
}

// Outage is one named fault of the infrastructure; Do returns once the
// fault is over (the service is back).
type Outage struct {
	Name string
	Do   func(ctx context.Context) error
}

func (c *Config) setDefaults() {
	if c.Messages == 0 {
		c.Messages = 2000
	}
	if c.DuplicateRatio == 0 {
		c.DuplicateRatio = 0.3
	}
	if c.Workers == 0 {
		c.Workers = 3
	}
	if c.Kills == 0 {
		c.Kills = 3
	}
	if c.LostSendRatio == 0 {
		c.LostSendRatio = 0.1
	}
	if c.FaultRatio == 0 {
		c.FaultRatio = 0.1
	}
	if c.DatabaseCuts == 0 {
		c.DatabaseCuts = 1
	}
	if c.Concurrency == 0 {
		c.Concurrency = 16
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Minute
	}
	if c.Settle == 0 {
		c.Settle = 3 * time.Minute
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
}

// Stack is the running infrastructure a soak uses. The soak starts and
// kills the worker processes itself.
type Stack struct {
	Temporal  client.Client
	Pool      *pgxpool.Pool
	Stripe    *stripesim.Server
	SendGrid  *sendgridsim.Server
	WorkerBin string
	Worker    workerproc.Config
	// Send delivers one raw message to the system (through the broker, or
	// the intake directly).
	Send func(ctx context.Context, raw []byte) error
	// Broker names the broker the messages go through, for the report.
	Broker string
	// RestartBroker stops and starts the broker; nil when it cannot be
	// restarted (Config.BrokerRestarts must then be 0).
	RestartBroker func(ctx context.Context) error
}

// Report is what a run found.
type Report struct {
	Messages        int `json:"messages"`
	Unique          int `json:"unique"`
	Invalid         int `json:"invalid"`
	Charges         int `json:"charges"`
	DoubleCharges   int `json:"double_charges"`
	Emails          int `json:"emails"`
	DuplicateEmails int `json:"duplicate_emails"`
	Lost            int `json:"lost"`
	// OpenPayments counts payments left open, by state (unknown,
	// processing, unexpected): an unknown one is a violation.
	OpenPayments   map[store.PaymentState]int `json:"open_payments"`
	Quarantined    int                        `json:"quarantined"`
	Paid           int                        `json:"paid"`
	Declined       int                        `json:"declined"`
	Broker         string                     `json:"broker,omitempty"`
	BrokerRestarts int                        `json:"broker_restarts"`
	Kills          int                        `json:"kills"`
	Restarts       int                        `json:"restarts"`
	DatabaseCuts   int                        `json:"database_cuts"`
	Faults         int                        `json:"faults"`
	Elapsed        time.Duration              `json:"elapsed"`
	Violations     []string                   `json:"violations"`
	// Outages are the outages that ran, in order.
	Outages []string `json:"outages,omitempty"`
	// SettledIn is how long after the sending phase and its chaos every
	// unique message's workflow had closed.
	SettledIn time.Duration `json:"settled_in"`
	// OrderReceipts are the order receipts' figures: duplicates against
	// the sends whose answer was lost (the refund receipts' are in
	// Refunds.Receipts).
	OrderReceipts ReceiptFigures `json:"order_receipts"`
	// Refunds is the refund phase's report (refunds.go).
	Refunds RefundReport `json:"refunds"`
	// Webhooks is set when the run had webhooks on.
	Webhooks *WebhookReport `json:"webhooks,omitempty"`
	// Audit is the end-of-run audit's report (audit.go).
	Audit *audit.Report `json:"audit,omitempty"`
	// Sources counts the inbox rows by the source that recorded them
	// (with NATS_CONSUMER_PER_ROUTE, each route's consumer).
	Sources map[string]int `json:"sources,omitempty"`
}

// ReceiptFigures are one receipt kind's figures.
type ReceiptFigures struct {
	// Delivered counts the mails SendGrid accepted, duplicates included.
	Delivered int `json:"delivered"`
	// LostSends counts the receipts whose first send SendGrid accepted
	// with the answer lost (a planned fault that fired).
	LostSends int `json:"lost_sends"`
	// Duplicates counts the deliveries beyond the first of each message,
	// and DuplicatesOfLost those of the receipts with a lost send.
	Duplicates       int `json:"duplicates"`
	DuplicatesOfLost int `json:"duplicates_of_lost"`
}

// add counts one message's receipt: delivered mails, and whether its
// first send's answer was planned lost.
func (f *ReceiptFigures) add(delivered int, lost bool) {
	f.Delivered += delivered
	dups := max(delivered-1, 0)
	f.Duplicates += dups
	if lost && delivered > 0 {
		f.LostSends++
		f.DuplicatesOfLost += dups
	}
}

// Ratio is the duplicates per lost send, 0 without a lost send.
func (f ReceiptFigures) Ratio() float64 {
	if f.LostSends == 0 {
		return 0
	}
	return float64(f.Duplicates) / float64(f.LostSends)
}

func (f ReceiptFigures) line(kind string) string {
	return fmt.Sprintf("%s: delivered %d, lost sends %d, duplicates %d (%d of them after a lost send): %.0f%% of lost sends\n",
		kind, f.Delivered, f.LostSends, f.Duplicates, f.DuplicatesOfLost, 100*f.Ratio())
}

// String renders the figures as the soak command prints them.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "messages %d (unique %d, invalid %d), time %s\n", r.Messages, r.Unique, r.Invalid, r.Elapsed.Round(time.Second))
	fmt.Fprintf(&b, "charges %d, double charges %d (must be 0)\n", r.Charges, r.DoubleCharges)
	if r.Audit != nil {
		fmt.Fprintf(&b, "audit: %d payment intents listed, %d Stripe requests, %d findings (must be 0)\n", r.Audit.Listed, r.Audit.Requests, r.Audit.Found)
	}
	fmt.Fprintf(&b, "emails %d, duplicate emails %d (at most one per message, only from the send-then-record window)\n", r.Emails, r.DuplicateEmails)
	fmt.Fprintf(&b, "paid %d, declined %d, lost %d (must be 0), quarantined %d\n", r.Paid, r.Declined, r.Lost, r.Quarantined)
	fmt.Fprintf(&b, "open payments: unknown %d (must be 0), processing %d, unexpected %d\n",
		r.OpenPayments[store.PaymentUnknown], r.OpenPayments[store.PaymentProcessing], r.OpenPayments[store.PaymentUnexpected])
	b.WriteString(r.OrderReceipts.line("order receipts"))
	b.WriteString(r.Refunds.String())
	b.WriteString(r.Refunds.Receipts.line("refund receipts"))
	b.WriteString(r.webhookLine())
	fmt.Fprintf(&b, "chaos: %d worker kills, %d SIGTERM restarts, %d database cuts, %d broker restarts (%s), %d provider faults\n",
		r.Kills, r.Restarts, r.DatabaseCuts, r.BrokerRestarts, r.Broker, r.Faults)
	if len(r.Outages) > 0 {
		fmt.Fprintf(&b, "outages: %s\n", strings.Join(r.Outages, ", "))
	}
	if len(r.Sources) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(r.Sources)) {
			parts = append(parts, fmt.Sprintf("%s %d", k, r.Sources[k]))
		}
		fmt.Fprintf(&b, "inbox rows by source: %s\n", strings.Join(parts, ", "))
	}
	fmt.Fprintf(&b, "every workflow closed %s after the last send\n", r.SettledIn.Round(time.Second))
	if len(r.Violations) == 0 {
		b.WriteString("violations: none\n")
	} else {
		fmt.Fprintf(&b, "violations (%d):\n", len(r.Violations))
		for _, v := range r.Violations {
			b.WriteString("  - " + v + "\n")
		}
	}
	return b.String()
}

// plan is what will be sent.
type plan struct {
	unique   []planned
	sends    []int // indexes into unique, in send order (first copies and early duplicates)
	late     []int // duplicates sent after every workflow completed
	invalid  [][]byte
	declined map[string]bool
	// lostMail holds the messages whose receipt's first send is accepted
	// by SendGrid with the answer lost (a lost send).
	lostMail map[string]bool
}

type planned struct {
	id  string
	raw []byte
}

func makePlan(cfg Config, rng *rand.Rand) plan {
	dups := int(float64(cfg.Messages) * cfg.DuplicateRatio)
	invalid := cfg.Messages / 100
	uniq := cfg.Messages - dups - invalid
	p := plan{declined: map[string]bool{}, lostMail: map[string]bool{}}
	for i := range uniq {
		id := fmt.Sprintf("soak_%d_%05d", cfg.Seed%100000, i)
		pm := "pm_card_visa"
		if rng.IntN(20) == 0 {
			pm = "pm_card_chargeDeclined"
			p.declined[id] = true
		}
		raw := fmt.Appendf(nil, `{"id":%q,"type":"order.placed","data":{"order_id":%d,"amount":%d,"currency":"usd","customer_email":"soak%d@example.com","payment_method":%q}}`,
			id, 100000+i, 100+rng.IntN(90000), i, pm)
		p.unique = append(p.unique, planned{id: id, raw: raw})
		p.sends = append(p.sends, i)
	}
	// Half the duplicates follow closely (often while the first copy's
	// workflow runs); the other half come after everything completed.
	for d := range dups {
		i := rng.IntN(uniq)
		if d%2 == 0 {
			at := min(len(p.sends), indexOf(p.sends, i)+1+rng.IntN(20))
			p.sends = append(p.sends[:at], append([]int{i}, p.sends[at:]...)...)
		} else {
			p.late = append(p.late, i)
		}
	}
	for i := range invalid {
		p.invalid = append(p.invalid, fmt.Appendf(nil, `{"id":"soak_bad_%d","type":"order.placed","data":{"order_id":%d,"amount":-1}}`, i, i))
	}
	return p
}

func indexOf(s []int, v int) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return len(s) - 1
}

// Run executes one soak against st and returns its report. The error is
// for a run that could not be carried out; violations are in the report.
func Run(ctx context.Context, cfg Config, st Stack) (Report, error) {
	cfg.setDefaults()
	if cfg.BrokerRestarts > 0 && st.RestartBroker == nil {
		return Report{}, fmt.Errorf("soak: %d broker restarts asked, but the broker %q cannot be restarted here", cfg.BrokerRestarts, st.Broker)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5eed)) //nolint:gosec // seeded on purpose: a soak must be reproducible from its seed; nothing secret
	p := makePlan(cfg, rng)
	rep := Report{Messages: cfg.Messages, Unique: len(p.unique), Invalid: len(p.invalid)}
	start := time.Now()
	cfg.Logf("soak: seed %d, %d messages (%d unique, %d duplicates, %d invalid), %d workers", cfg.Seed, cfg.Messages, len(p.unique), len(p.sends)-len(p.unique)+len(p.late), len(p.invalid), cfg.Workers)

	// Lost receipt sends, then provider faults, attached to chosen
	// messages up front.
	for _, u := range p.unique {
		if !p.declined[u.id] && rng.Float64() < cfg.LostSendRatio {
			st.SendGrid.AddFault(sendgridsim.Fault{Match: sendgridsim.Match{MessageID: u.id}, Kind: sendgridsim.FaultLostAfter, Times: 1})
			p.lostMail[u.id] = true
		}
	}
	for _, u := range p.unique {
		if rng.Float64() >= cfg.FaultRatio {
			continue
		}
		rep.Faults++
		switch k := rng.IntN(7); k {
		case 0:
			st.Stripe.AddFault(stripesim.Fault{Match: stripesim.Match{MessageID: u.id}, Kind: stripesim.FaultErrorBefore, Status: 503, Times: 1})
		case 1:
			st.Stripe.AddFault(stripesim.Fault{Match: stripesim.Match{MessageID: u.id}, Kind: stripesim.FaultErrorAfter, Times: 1})
		case 2:
			st.Stripe.AddFault(stripesim.Fault{Match: stripesim.Match{MessageID: u.id}, Kind: stripesim.FaultLostAfter, Times: 1})
		case 3:
			st.Stripe.AddFault(stripesim.Fault{Match: stripesim.Match{MessageID: u.id}, Kind: stripesim.FaultRateLimit, Times: 2})
		case 4:
			st.Stripe.AddFault(stripesim.Fault{Match: stripesim.Match{MessageID: u.id}, Kind: stripesim.FaultDelay, Delay: 800 * time.Millisecond, Times: 1})
		case 5:
			st.SendGrid.AddFault(sendgridsim.Fault{Match: sendgridsim.Match{MessageID: u.id}, Kind: sendgridsim.FaultLostAfter, Times: 1})
			p.lostMail[u.id] = true
		case 6:
			st.SendGrid.AddFault(sendgridsim.Fault{Match: sendgridsim.Match{MessageID: u.id}, Kind: sendgridsim.FaultErrorBefore, Status: 503, Times: 1})
		}
	}

	// Workers.
	w := &workers{bin: st.WorkerBin, cfg: st.Worker}
	defer w.stopAll()
	if cfg.Webhooks {
		h, err := startWebhooks(st)
		if err != nil {
			return rep, err
		}
		defer h.stop()
		w.hooks = h
	}
	for range cfg.Workers {
		if err := w.add(); err != nil {
			return rep, err
		}
	}

	// Chaos: kills and database cuts spread over the sending phase.
	var kills, cuts, restarts, brokerRestarts atomic.Int32
	var unclean, outages []string // written by the chaos goroutine only, read after chaosDone
	chaosCtx, stopChaos := context.WithCancel(ctx)
	chaosDone := make(chan struct{})
	go func() {
		defer close(chaosDone)
		events := make([]string, 0, cfg.Kills+cfg.DatabaseCuts+len(cfg.Outages))
		for range cfg.Kills {
			events = append(events, "kill")
		}
		for range cfg.DatabaseCuts {
			events = append(events, "cut")
		}
		for range max(cfg.Restarts, 0) {
			events = append(events, "restart")
		}
		for range max(cfg.BrokerRestarts, 0) {
			events = append(events, "broker")
		}
		rng.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
		// The outages keep their order, spread evenly among the rest.
		for i := range cfg.Outages {
			at := min(len(events), (i+1)*len(events)/(len(cfg.Outages)+1)+i)
			events = append(events[:at], append([]string{fmt.Sprintf("outage:%d", i)}, events[at:]...)...)
		}
		for _, ev := range events {
			select {
			case <-chaosCtx.Done():
				return
			case <-time.After(time.Duration(1500+rng.IntN(2500)) * time.Millisecond):
			}
			switch ev {
			case "kill":
				if err := w.killOne(rng.IntN(cfg.Workers)); err != nil {
					cfg.Logf("soak: restart after kill: %v", err)
				}
				kills.Add(1)
				cfg.Logf("soak: killed a worker (%d/%d)", kills.Load(), cfg.Kills)
			case "restart":
				if err := w.restartOne(rng.IntN(cfg.Workers)); err != nil {
					unclean = append(unclean, fmt.Sprintf("rolling restart: %v", err))
				}
				restarts.Add(1)
				cfg.Logf("soak: replaced a worker with SIGTERM (%d/%d)", restarts.Load(), cfg.Restarts)
			case "broker":
				if err := st.RestartBroker(chaosCtx); err != nil {
					unclean = append(unclean, fmt.Sprintf("broker restart: %v", err))
				}
				brokerRestarts.Add(1)
				cfg.Logf("soak: restarted the broker %s (%d/%d)", st.Broker, brokerRestarts.Load(), cfg.BrokerRestarts)
			case "cut":
				n, err := cutConnections(chaosCtx, st.Pool)
				if err != nil {
					cfg.Logf("soak: cut database connections: %v", err)
				}
				cuts.Add(1)
				cfg.Logf("soak: terminated %d worker connections to Postgres", n)
			default:
				var i int
				if _, err := fmt.Sscanf(ev, "outage:%d", &i); err != nil {
					continue
				}
				o := cfg.Outages[i]
				started := time.Now()
				if err := o.Do(chaosCtx); err != nil {
					unclean = append(unclean, fmt.Sprintf("outage %s: %v", o.Name, err))
				}
				outages = append(outages, o.Name)
				cfg.Logf("soak: outage %s over in %s", o.Name, time.Since(started).Round(time.Millisecond))
			}
		}
	}()

	if err := sendAll(ctx, st.Send, cfg.Concurrency, p.sends, p.unique, p.invalid); err != nil {
		stopChaos()
		return rep, err
	}
	cfg.Logf("soak: sent %d messages in %s", len(p.sends)+len(p.invalid), time.Since(start).Round(time.Millisecond))
	<-chaosDone // every kill and cut happens while work is in flight
	stopChaos()
	rep.Violations = append(rep.Violations, unclean...)
	rep.Outages = outages

	// Wait until every unique message's workflow has closed.
	lastSend := time.Now()
	rep.Violations = append(rep.Violations, waitAll(ctx, st.Temporal, p.unique, cfg.Settle, cfg.Logf)...)
	rep.SettledIn = time.Since(lastSend)
	// The late duplicates, long after completion.
	late := make([]int, len(p.late))
	copy(late, p.late)
	if err := sendAll(ctx, st.Send, cfg.Concurrency, late, p.unique, nil); err != nil {
		return rep, err
	}
	cfg.Logf("soak: sent %d late duplicates", len(late))
	// Give the late copies time to do harm, if they could.
	select {
	case <-ctx.Done():
	case <-time.After(3 * time.Second):
	}

	rep.Kills, rep.DatabaseCuts, rep.Restarts = int(kills.Load()), int(cuts.Load()), int(restarts.Load())
	rep.Broker, rep.BrokerRestarts = st.Broker, int(brokerRestarts.Load())
	if cfg.Webhooks {
		rep.Webhooks = &WebhookReport{Stripe: st.Stripe.WebhookStats(), SendGrid: st.SendGrid.WebhookStats()}
	}
	if err := reconcile(ctx, st, p, &rep); err != nil {
		return rep, err
	}
	// Refunds of the settled orders, with copies and a kill (refunds.go).
	refunds, violations, err := runRefunds(ctx, cfg, st, p, rng, w)
	rep.Refunds = refunds
	rep.Violations = append(rep.Violations, violations...)
	if err != nil {
		return rep, err
	}
	// The audit of the whole run finds nothing (audit.go).
	if err := auditRun(ctx, st, start, &rep); err != nil {
		return rep, err
	}
	if err := countSources(ctx, st, &rep); err != nil {
		return rep, err
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

func sendAll(ctx context.Context, send func(context.Context, []byte) error, concurrency int, order []int, unique []planned, invalid [][]byte) error {
	work := make(chan []byte)
	var (
		wg       sync.WaitGroup
		firstErr error
		once     sync.Once
	)
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for raw := range work {
				for try := 0; ; try++ {
					err := send(ctx, raw)
					if err == nil {
						break
					}
					// The system may be mid-chaos (a cut connection):
					// a producer retries, which is one more duplicate.
					if try >= 20 || ctx.Err() != nil {
						once.Do(func() { firstErr = fmt.Errorf("send: %w", err) })
						break
					}
					time.Sleep(200 * time.Millisecond)
				}
			}
		}()
	}
	for n, i := range order {
		select {
		case work <- unique[i].raw:
		case <-ctx.Done():
		}
		if n < len(invalid) {
			select {
			case work <- invalid[n]:
			case <-ctx.Done():
			}
		}
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

func waitAll(ctx context.Context, tc client.Client, unique []planned, settle time.Duration, logf func(string, ...any)) []string {
	deadline := time.Now().Add(settle)
	var (
		mu       sync.Mutex
		problems []string
		wg       sync.WaitGroup
		sem      = make(chan struct{}, 32)
	)
	report := func(format string, args ...any) {
		mu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	for _, u := range unique {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			wfID, _ := identity.WorkflowID(message.ConsumerOrderPlaced, u.id)
			for {
				var res workflows.Status
				callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := tc.GetWorkflow(callCtx, wfID, "").Get(callCtx, &res)
				cancel()
				var (
					notFound *serviceerror.NotFound
					timedOut *serviceerror.DeadlineExceeded
				)
				switch {
				case err == nil:
					return
				case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &timedOut) || errors.As(err, &notFound):
					// Still running, or not started yet (in the inbox or the broker).
				default:
					report("%s: workflow failed: %v", u.id, err)
					return
				}
				if time.Now().After(deadline) || ctx.Err() != nil {
					report("%s: workflow not completed after %s (%s)", u.id, settle, describe(ctx, tc, wfID))
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	sort.Strings(problems)
	logf("soak: workflows settled, %d problems", len(problems))
	return problems
}

// describe says why a workflow has not completed, for the report.
func describe(ctx context.Context, tc client.Client, wfID string) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	d, err := tc.DescribeWorkflow(ctx, wfID, "")
	if err != nil {
		return err.Error()
	}
	raw := d.RawResponse
	parts := []string{raw.GetWorkflowExecutionInfo().GetStatus().String()}
	for _, pa := range raw.GetPendingActivities() {
		parts = append(parts, fmt.Sprintf("activity %s attempt %d: %s", pa.GetActivityType().GetName(), pa.GetAttempt(), pa.GetLastFailure().GetMessage()))
	}
	return strings.Join(parts, "; ")
}

// cutConnections terminates every other connection to the soak's database.
func cutConnections(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `
		SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		 WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`).Scan(&n)
	return n, err
}

// reconcile counts what the providers, Postgres and Temporal saw.
func reconcile(ctx context.Context, st Stack, p plan, rep *Report) error {
	stripe, mail := st.Stripe.Stats(), st.SendGrid.Stats()
	rep.Charges, rep.Emails = stripe.Charges, mail.Deliveries
	db := store.New(st.Pool)
	for _, u := range p.unique {
		charges := stripe.ChargesByMessage[u.id]
		if charges > 1 {
			rep.DoubleCharges++
			rep.Violations = append(rep.Violations, fmt.Sprintf("%s charged %d times", u.id, charges))
		}
		emails := mail.DeliveriesByKey[identity.MustKey(identity.EffectEmail, u.id)]
		rep.OrderReceipts.add(emails, p.lostMail[u.id])
		if emails > 1 {
			rep.DuplicateEmails += emails - 1
		}
		if emails > 2 {
			rep.Violations = append(rep.Violations, fmt.Sprintf("%s: %d receipts (at most one duplicate is documented)", u.id, emails))
		}
		ms, err := db.Status(ctx, message.ConsumerOrderPlaced, u.id)
		if err != nil {
			return err
		}
		switch {
		case ms.Processed == nil:
			rep.Lost++
			rep.Violations = append(rep.Violations, fmt.Sprintf("%s: no processed row (lost)", u.id))
		case p.declined[u.id]:
			rep.Declined++
			if charges != 0 || emails != 0 || ms.Processed.Outcome != store.OutcomePaymentFailed {
				rep.Violations = append(rep.Violations, fmt.Sprintf("%s: declined card, outcome %s, %d charges, %d receipts", u.id, ms.Processed.Outcome, charges, emails))
			}
		default:
			rep.Paid++
			if charges != 1 || ms.Processed.Outcome != store.OutcomePaid {
				rep.Violations = append(rep.Violations, fmt.Sprintf("%s: outcome %s with %d charges", u.id, ms.Processed.Outcome, charges))
			}
			if emails == 0 || ms.Order == nil || !receiptDone(ms.Order.ReceiptStatus) {
				rep.Violations = append(rep.Violations, fmt.Sprintf("%s: paid but receipt %v (%d delivered)", u.id, receiptOf(ms), emails))
			}
		}
	}
	rep.OpenPayments = map[store.PaymentState]int{}
	for _, state := range store.OpenPaymentStates {
		open, err := db.OpenPayments(ctx, state, 100000)
		if err != nil {
			return err
		}
		rep.OpenPayments[state] = len(open)
		for _, p := range open {
			if state == store.PaymentUnknown {
				rep.Violations = append(rep.Violations, fmt.Sprintf("%s: payment unknown", p.MessageID))
			}
		}
	}
	q, err := db.QuarantineList(ctx, 100000)
	if err != nil {
		return err
	}
	rep.Quarantined = len(q)
	if rep.Quarantined != len(p.invalid) {
		rep.Violations = append(rep.Violations, fmt.Sprintf("%d quarantined, want the %d invalid messages", rep.Quarantined, len(p.invalid)))
	}
	return nil
}

// countSources counts the inbox rows by the source that recorded them.
func countSources(ctx context.Context, st Stack, rep *Report) error {
	rows, err := st.Pool.Query(ctx, `SELECT source, count(*) FROM inbox GROUP BY source`)
	if err != nil {
		return err
	}
	var source string
	var n int
	rep.Sources = map[string]int{}
	_, err = pgx.ForEachRow(rows, []any{&source, &n}, func() error {
		rep.Sources[source] = n
		return nil
	})
	return err
}

func receiptOf(ms store.MessageStatus) string {
	if ms.Order == nil {
		return "no order"
	}
	return ms.Order.ReceiptStatus
}

// workers keeps N worker processes running.
type workers struct {
	bin   string
	cfg   workerproc.Config
	mu    sync.Mutex
	procs []*workerproc.Proc
	// hooks, when set, gives every process a webhook listener behind the
	// soak's load balancer (webhooks.go).
	hooks *hooks
}

func (w *workers) add() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	env := workerproc.Env(w.cfg)
	var addr string
	if w.hooks != nil {
		a, err := freeAddr()
		if err != nil {
			return err
		}
		addr = a
		env = append(env, w.hooks.env...)
		env = append(env, "EFFECTIVELY_WEBHOOK_ADDR="+addr)
	}
	p, err := workerproc.Start(w.bin, env)
	if err != nil {
		return err
	}
	if w.hooks != nil {
		w.hooks.lb.add(p, addr)
	}
	w.procs = append(w.procs, p)
	return nil
}

func (w *workers) killOne(i int) error {
	w.mu.Lock()
	p := w.procs[i%len(w.procs)]
	w.procs = append(w.procs[:i%len(w.procs)], w.procs[i%len(w.procs)+1:]...)
	if w.hooks != nil {
		w.hooks.lb.remove(p)
	}
	w.mu.Unlock()
	p.Kill()
	time.Sleep(500 * time.Millisecond)
	return w.add()
}

func (w *workers) stopAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.procs {
		p.Stop(10 * time.Second)
	}
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/api/workflowservice/v1"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/leaf/identity"
)

// planner makes the messages of every phase of a run, with IDs and order
// IDs that no other phase uses.
type planner struct {
	rng       *rand.Rand
	tag       string
	nextOrder int64
}

func newPlanner(seed uint64) *planner {
	return &planner{
		rng:       rand.New(rand.NewPCG(seed, seed^0xbe7c4)), //nolint:gosec // a repeatable plan, nothing secret
		tag:       randomTag(3),
		nextOrder: 1_000_000,
	}
}

type planMsg struct {
	id       string
	orderID  int64
	declined bool
	raw      []byte
}

// plan is what one phase sends: sends lists indexes into msgs in publish
// order; the first occurrence of an index is the original, later ones are
// copies.
type plan struct {
	name    string
	pattern string // LIKE pattern matching every message ID of the plan
	msgs    []planMsg
	sends   []int
	dups    int
}

func (pl *planner) plan(name string, n int, dupRatio, declineRatio float64) plan {
	dups := int(float64(n) * dupRatio)
	uniq := max(1, n-dups)
	prefix := fmt.Sprintf("bench_%s_%s_", pl.tag, name)
	p := plan{name: name, pattern: strings.ReplaceAll(prefix, "_", `\_`) + "%", dups: dups}
	for i := range uniq {
		m := planMsg{id: fmt.Sprintf("%s%05d", prefix, i), orderID: pl.nextOrder}
		pl.nextOrder++
		pm := "pm_card_visa"
		if pl.rng.Float64() < declineRatio {
			pm, m.declined = "pm_card_chargeDeclined", true
		}
		m.raw = fmt.Appendf(nil, `{"id":%q,"type":"order.placed","data":{"order_id":%d,"amount":%d,"currency":"usd","customer_email":"bench%d@example.com","payment_method":%q}}`,
			m.id, m.orderID, 100+pl.rng.IntN(90000), i, pm)
		p.msgs = append(p.msgs, m)
	}
	// Originals in order; each copy shortly after its original (within the
	// next 50 sends), so many arrive while the original's workflow runs.
	type keyed struct {
		key float64
		idx int
	}
	order := make([]keyed, 0, uniq+dups)
	for i := range uniq {
		order = append(order, keyed{float64(i), i})
	}
	for range dups {
		i := pl.rng.IntN(uniq)
		order = append(order, keyed{float64(i) + 0.5 + pl.rng.Float64()*50, i})
	}
	sort.SliceStable(order, func(a, b int) bool { return order[a].key < order[b].key })
	for _, k := range order {
		p.sends = append(p.sends, k.idx)
	}
	return p
}

// e2eMode is how a run is paced: closed loop (at most inFlight unique
// messages unrecorded), or open loop at rate unique messages/s (inFlight
// then only a safety cap).
type e2eMode struct {
	inFlight int
	rate     float64
}

// clockOffset estimates Postgres's clock minus ours, from the sample with
// the shortest round trip.
func (s *stack) clockOffset(ctx context.Context) (time.Duration, error) {
	best, bestRTT := time.Duration(0), time.Duration(-1)
	for range 7 {
		t0 := time.Now()
		var db time.Time
		if err := s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&db); err != nil {
			return 0, err
		}
		t1 := time.Now()
		if rtt := t1.Sub(t0); bestRTT < 0 || rtt < bestRTT {
			bestRTT = rtt
			best = db.Sub(t0.Add(rtt / 2))
		}
	}
	return best, nil
}

// completionQuery counts the messages of a plan whose effects are recorded:
// a processed row, and for a paid order a receipt that reached a final state.
const completionQuery = `
	SELECT count(*) FROM processed_messages p LEFT JOIN orders o ON o.id = p.order_id
	 WHERE p.consumer = $1 AND p.message_id LIKE $2
	   AND (p.outcome <> 'paid' OR o.receipt_status IN ('sent', 'failed', 'unknown'))`

// completionTimes reads when each message's last effect was recorded, on
// the database's clock (now() of the recording transaction).
const completionTimes = `
	SELECT p.message_id, p.outcome, coalesce(o.receipt_status, ''),
	       greatest(p.processed_at, CASE WHEN p.outcome = 'paid' THEN o.updated_at END)
	  FROM processed_messages p LEFT JOIN orders o ON o.id = p.order_id
	 WHERE p.consumer = $1 AND p.message_id LIKE $2`

func (s *stack) duplicatesCounted(ctx context.Context, pattern string) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(duplicates), 0) FROM inbox WHERE consumer = $1 AND message_id LIKE $2`,
		message.ConsumerOrderPlaced, pattern).Scan(&n)
	return n, err
}

func (s *stack) publish(ctx context.Context, raw []byte, msgID string) error {
	var err error
	for try := range 5 {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = s.broker.Publish(pctx, raw, msgID)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		if try < 4 {
			_ = sleepCtx(ctx, 200*time.Millisecond)
		}
	}
	return fmt.Errorf("publish: %w", err)
}

// progress is the completion poller's view, shared with the publisher.
type progress struct {
	completed  atomic.Int64
	lastChange atomic.Int64 // unix nanos
	lastErr    atomic.Value // error
	signal     chan struct{}
}

func (s *stack) poll(ctx context.Context, every time.Duration, pattern string, pr *progress) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		var n int64
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := s.pool.QueryRow(qctx, completionQuery, message.ConsumerOrderPlaced, pattern).Scan(&n)
		cancel()
		if err != nil && ctx.Err() == nil {
			pr.lastErr.Store(err)
		}
		if err == nil && n != pr.completed.Load() {
			pr.completed.Store(n)
			pr.lastChange.Store(time.Now().UnixNano())
		}
		select {
		case pr.signal <- struct{}{}:
		default:
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// stalled reports a phase that has made no progress for too long.
func (s *stack) stalled(pr *progress, stall time.Duration, what string) error {
	if time.Since(time.Unix(0, pr.lastChange.Load())) < stall {
		return nil
	}
	msg := fmt.Sprintf("%s: no progress for %s (%d recorded)", what, stall, pr.completed.Load())
	if err, _ := pr.lastErr.Load().(error); err != nil {
		msg += "; last poll error: " + err.Error()
	}
	select {
	case <-s.worker.Done():
		msg += fmt.Sprintf("; the worker exited: %v", s.worker.Err())
	default:
	}
	return errors.New(msg + "\nworker log tail:\n" + tail(s.worker.Logs(), 3000))
}

// waitCompleted waits until the poller counts at least n messages done,
// failing when progress stalls or ctx ends.
func (s *stack) waitCompleted(ctx context.Context, cfg Config, pr *progress, what string, n int64) error {
	for pr.completed.Load() < n {
		if err := s.stalled(pr, cfg.Stall, what); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-pr.signal:
		}
	}
	return nil
}

// runE2E publishes p through JetStream and measures until every unique
// message has its effects recorded.
func (s *stack) runE2E(ctx context.Context, cfg Config, p plan, mode e2eMode) (Result, error) {
	res := Result{InFlight: mode.inFlight, TargetRate: mode.rate, Messages: len(p.sends), Unique: len(p.msgs), Duplicates: p.dups}
	if mode.rate > 0 {
		res.InFlight = 0
	}
	offset, err := s.clockOffset(ctx)
	if err != nil {
		return res, fmt.Errorf("read the database clock: %w", err)
	}
	pctx, stopPoll := context.WithCancel(ctx)
	pr := &progress{signal: make(chan struct{}, 1)}
	pr.lastChange.Store(time.Now().UnixNano())
	var pollDone sync.WaitGroup
	pollDone.Go(func() { s.poll(pctx, cfg.Poll, p.pattern, pr) })
	defer func() { stopPoll(); pollDone.Wait() }()

	before := s.sample()
	instr := s.startInstructions(cfg)
	defer func() {
		if instr != nil { // an error return: stop perf
			_, _ = instr.stop()
		}
	}()
	published := make([]time.Time, len(p.msgs))
	sent := make([]bool, len(p.msgs))
	var nUnique int64
	var pubLat []time.Duration
	t0 := time.Now()
	for _, idx := range p.sends {
		m := p.msgs[idx]
		if sent[idx] {
			// A copy: no Nats-Msg-Id, so the broker stores it and the
			// consumer meets it. It does not count against the limit.
			if err := s.publish(ctx, m.raw, ""); err != nil {
				return res, err
			}
			continue
		}
		if mode.rate > 0 {
			due := t0.Add(time.Duration(float64(nUnique) / mode.rate * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				if err := sleepCtx(ctx, d); err != nil {
					return res, err
				}
			}
		}
		if err := s.waitCompleted(ctx, cfg, pr, p.name, nUnique-int64(mode.inFlight)+1); err != nil {
			return res, err
		}
		published[idx] = time.Now()
		if err := s.publish(ctx, m.raw, m.id); err != nil {
			return res, err
		}
		pubLat = append(pubLat, time.Since(published[idx]))
		sent[idx] = true
		nUnique++
	}
	if err := s.waitCompleted(ctx, cfg, pr, p.name, int64(len(p.msgs))); err != nil {
		return res, err
	}
	after := s.sample()
	counted := s.stopInstructions(cfg, instr)
	instr = nil
	stopPoll()
	pollDone.Wait()
	res.CPU = cpuBetween(before, after)
	res.CPU.Instructions = counted

	// Per-message completion times, on the database's clock.
	rows, err := s.pool.Query(ctx, completionTimes, message.ConsumerOrderPlaced, p.pattern)
	if err != nil {
		return res, err
	}
	done := map[string]time.Time{}
	for rows.Next() {
		var (
			id, outcome, receipt string
			at                   time.Time
		)
		if err := rows.Scan(&id, &outcome, &receipt, &at); err != nil {
			rows.Close()
			return res, err
		}
		done[id] = at.Add(-offset)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, err
	}
	// Where the time went: the inbox row's timestamps, same clock.
	marks := map[string][2]time.Time{}
	rows, err = s.pool.Query(ctx, `SELECT message_id, received_at, coalesce(dispatched_at, received_at) FROM inbox WHERE consumer = $1 AND message_id LIKE $2`,
		message.ConsumerOrderPlaced, p.pattern)
	if err != nil {
		return res, err
	}
	for rows.Next() {
		var (
			id       string
			recv, dp time.Time
		)
		if err := rows.Scan(&id, &recv, &dp); err != nil {
			rows.Close()
			return res, err
		}
		marks[id] = [2]time.Time{recv.Add(-offset), dp.Add(-offset)}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, err
	}
	var intake, start, effects []time.Duration
	lat := make([]time.Duration, 0, len(p.msgs))
	last := t0
	for i, m := range p.msgs {
		at, ok := done[m.id]
		if !ok {
			return res, fmt.Errorf("%s: message %s has no processed row", p.name, m.id)
		}
		// now() is the recording transaction's start, a little before its
		// commit; a clock estimate can be off by the probe's half round
		// trip. Never report a negative latency.
		lat = append(lat, max(0, at.Sub(published[i])))
		if m, ok := marks[m.id]; ok {
			intake = append(intake, max(0, m[0].Sub(published[i])))
			start = append(start, max(0, m[1].Sub(m[0])))
			effects = append(effects, max(0, at.Sub(m[1])))
		}
		if at.After(last) {
			last = at
		}
	}
	res.Elapsed = last.Sub(t0)
	res.Latency = summarize(lat)
	res.Stages = &Stages{Intake: summarize(intake), Start: summarize(start), Effects: summarize(effects), Publish: summarize(pubLat)}
	res.Throughput = float64(len(p.msgs)) / res.Elapsed.Seconds()

	// The copies: wait (bounded) until the inbox has counted each of them.
	deadline := time.Now().Add(min(cfg.Stall, 30*time.Second))
	for {
		n, err := s.duplicatesCounted(ctx, p.pattern)
		if err != nil {
			return res, err
		}
		res.Suppressed = n
		if n >= p.dups || time.Now().After(deadline) {
			break
		}
		if err := sleepCtx(ctx, cfg.Poll); err != nil {
			return res, err
		}
	}
	res.DuplicateRate = float64(res.Suppressed) / res.Elapsed.Seconds()
	for _, m := range p.msgs[:min(len(p.msgs), cfg.HistorySample)] {
		if id, err := identity.WorkflowID(message.ConsumerOrderPlaced, m.id); err == nil {
			res.workflowIDs = append(res.workflowIDs, id)
		}
	}
	return res, nil
}

// runBurst publishes copies of p's already recorded messages back to back
// and measures how fast the worker's inbox recognises them: each copy is a
// delivery, an inbox insert that conflicts, and an ack.
func (s *stack) runBurst(ctx context.Context, cfg Config, p plan, copies int) (Burst, error) {
	b := Burst{Copies: copies}
	base, err := s.duplicatesCounted(ctx, p.pattern)
	if err != nil {
		return b, err
	}
	// Progress is polled from the worker's own counter of the copies its
	// inbox recognised (counted once the copy's commit returned). Polling
	// the inbox itself scans a few thousand rows every 10ms (about 5 ms
	// each), work the plain consumer it is compared with does not pay.
	// The inbox's count is read once at the end, and is what the result
	// reports.
	metricBase, err := s.workerDuplicates(ctx)
	if err != nil {
		return b, err
	}
	before := s.sample()
	t0 := time.Now()
	raws := make([][]byte, copies)
	for i := range copies {
		raws[i] = p.msgs[i%len(p.msgs)].raw
	}
	if err := s.broker.PublishBurst(ctx, raws); err != nil {
		return b, fmt.Errorf("duplicate burst: publish: %w", err)
	}
	// Poll more often than the completion poller: the whole burst takes
	// about a second, and the poll interval bounds the measurement's error.
	every := min(cfg.Poll, 10*time.Millisecond)
	lastN, lastChange := 0, time.Now()
	for {
		m, err := s.workerDuplicates(ctx)
		if err != nil {
			return b, err
		}
		n := int(m - metricBase)
		now := time.Now()
		if n != lastN {
			lastN, lastChange = n, now
		}
		if n >= copies {
			b.Elapsed = now.Sub(t0)
			break
		}
		if now.Sub(lastChange) > cfg.Stall {
			return b, fmt.Errorf("duplicate burst: %d of %d copies recognised, no progress for %s", n, copies, cfg.Stall)
		}
		if err := sleepCtx(ctx, every); err != nil {
			return b, err
		}
	}
	b.CPU = cpuBetween(before, s.sample())
	n, err := s.duplicatesCounted(ctx, p.pattern)
	if err != nil {
		return b, err
	}
	if b.Suppressed = n - base; b.Suppressed < copies {
		return b, fmt.Errorf("duplicate burst: the worker recognised %d copies, its inbox counts %d", copies, b.Suppressed)
	}
	b.Rate = float64(b.Suppressed) / b.Elapsed.Seconds()
	return b, nil
}

// workerDuplicates reads the first worker's count of copies recognised by
// its inbox (effectively_intake_decisions_total, decision "duplicate",
// every consumer).
func (s *stack) workerDuplicates(ctx context.Context) (float64, error) {
	body, err := scrape(ctx, s.workerMetrics)
	if err != nil {
		return 0, fmt.Errorf("worker metrics: %w", err)
	}
	by, err := counterBy(body, metrics.NameIntakeDecisions, "decision", nil)
	return by[string(metrics.DecisionDuplicate)], err
}

// summarize sorts lat and takes its percentiles (nearest rank).
func summarize(lat []time.Duration) Latency {
	if len(lat) == 0 {
		return Latency{}
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		i := int(p*float64(len(lat))+0.999999) - 1
		return lat[min(max(i, 0), len(lat)-1)]
	}
	return Latency{N: len(lat), P50: pct(0.50), P90: pct(0.90), P99: pct(0.99), Max: lat[len(lat)-1]}
}

// versions names the components' versions for the report.
func (s *stack) versions(ctx context.Context) (pg, broker, temporal string) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = s.pool.QueryRow(qctx, `SHOW server_version`).Scan(&pg)
	if info, err := s.temporal.WorkflowService().GetSystemInfo(qctx, &workflowservice.GetSystemInfoRequest{}); err == nil {
		temporal = info.GetServerVersion()
	}
	if s.devServer != nil {
		temporal += " (dev server, in memory)"
	}
	return pg, s.broker.Version(), "temporal " + temporal
}

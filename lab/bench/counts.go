package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/workflowservice/v1"
)

// Costs is what one phase cost in units that do not depend on how loaded
// the machine is: Temporal actions (what Temporal Cloud bills), Postgres
// commits, and history events. Timing figures vary from run to run on a
// shared machine; these should not.
type Costs struct {
	// Units is what the per-unit figures divide by, Unit names it (unique
	// message, paid message, copy, workflow, message sent).
	Units int    `json:"units"`
	Unit  string `json:"unit"`
	// Actions counts the dev server's `action` metric (namespace default)
	// over the phase, by its action_type label; nil when the server's
	// metrics could not be read.
	Actions map[string]float64 `json:"actions"`
	// Commits counts the Postgres transactions the workers (and the
	// reference points' pool) committed over the phase, read-only ones and
	// a new connection's start included, as pg_stat_database.xact_commit
	// counts them; Rollbacks those rolled back. They are counted by a
	// proxy the workers connect through (pgProxy): the harness's own
	// queries are not among them. -1 when not counted.
	Commits   float64 `json:"commits"`
	Rollbacks float64 `json:"rollbacks"`
	// CommitsByShape splits Commits by the transaction's statements (see
	// shape): "UPDATE", "tx(INSERT,UPDATE)", "prepare", "connect".
	CommitsByShape map[string]float64 `json:"commits_by_shape,omitempty"`
	// Interval is the time between the two readings: the phase and the
	// wait for it to settle.
	Interval time.Duration `json:"interval"`
	// HistoryEvents is the mean history length of HistorySample of the
	// phase's workflows (DescribeWorkflowExecution), 0 when none sampled.
	HistoryEvents float64 `json:"history_events,omitempty"`
	HistorySample int     `json:"history_sample,omitempty"`
	// HistoryBytes is the mean HistorySizeBytes of the same workflows: what
	// the server stored and sends to a worker that replays one.
	HistoryBytes float64 `json:"history_bytes,omitempty"`
	// ServerRequests counts what the phase asked of the dev server, by
	// "frontend <operation>" (its service_requests of namespace default:
	// the workers' and the harness's RPCs, long polls included) and
	// "persistence <operation>" (persistence_requests of namespace default,
	// every service: its writes and reads of SQLite); nil when the
	// server's metrics could not be read.
	ServerRequests map[string]float64 `json:"server_requests,omitempty"`
	// ProviderRequests counts the requests the simulators received over
	// the phase, by provider and operation ("stripe create", "stripe
	// confirm", "sendgrid send"): what a message costs at the providers.
	ProviderRequests map[string]float64 `json:"provider_requests,omitempty"`
}

// ProviderRequestsText renders ProviderRequests per unit, sorted.
func (c *Costs) ProviderRequestsText() string {
	if c == nil || len(c.ProviderRequests) == 0 || c.Units == 0 {
		return "-"
	}
	keys := make([]string, 0, len(c.ProviderRequests))
	for k := range c.ProviderRequests {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, c.ProviderRequests[k]/float64(c.Units)))
	}
	return strings.Join(parts, ", ")
}

// ActionsMeasured reports whether the actions were counted.
func (c *Costs) ActionsMeasured() bool { return c != nil && c.Actions != nil }

// CommitsMeasured reports whether the commits were counted.
func (c *Costs) CommitsMeasured() bool { return c != nil && c.Commits >= 0 }

// ActionsTotal sums the actions of every type.
func (c *Costs) ActionsTotal() float64 {
	if c == nil {
		return 0
	}
	var t float64
	for _, v := range c.Actions {
		t += v
	}
	return t
}

// ActionsPer is the actions per unit.
func (c *Costs) ActionsPer() float64 { return per(c.ActionsTotal(), c.Units) }

// CommitsPer is the commits per unit.
func (c *Costs) CommitsPer() float64 {
	if c == nil {
		return 0
	}
	return per(c.Commits, c.Units)
}

// CommitsByShapeText renders the commits per unit by the transaction's
// shape, largest first, e.g. "UPDATE 2.00, tx(INSERT,UPDATE) 1.00".
func (c *Costs) CommitsByShapeText() string {
	if !c.CommitsMeasured() {
		return "not measured"
	}
	return perUnitText(c.CommitsByShape, c.Units, func(k string) string { return k })
}

// ActionsByType renders the actions per unit by type, largest first, e.g.
// "StartWorkflowExecution 1.00, BatchMarkers 1.00"; the grpc_ and command_
// prefixes of the metric's label are dropped.
func (c *Costs) ActionsByType() string {
	if !c.ActionsMeasured() {
		return "not measured"
	}
	if len(c.Actions) == 0 {
		return "none"
	}
	return perUnitText(c.Actions, c.Units, func(k string) string {
		return strings.TrimPrefix(strings.TrimPrefix(k, "grpc_"), "command_")
	})
}

// perUnitText renders counts per unit, largest first, named by name.
func perUnitText(counts map[string]float64, units int, name func(string) string) string {
	if len(counts) == 0 {
		return "none"
	}
	keys := slices.Collect(maps.Keys(counts))
	slices.SortFunc(keys, func(a, b string) int {
		if counts[a] != counts[b] {
			if counts[a] > counts[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		if units > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f", name(k), counts[k]/float64(units)))
		} else {
			parts = append(parts, fmt.Sprintf("%s %.0f", name(k), counts[k]))
		}
	}
	return strings.Join(parts, ", ")
}

func per(v float64, n int) float64 {
	if n <= 0 {
		return 0
	}
	return v / float64(n)
}

// reading is one sample of the counters Costs are differences of.
type reading struct {
	at        time.Time
	actions   map[string]float64 // nil: not readable
	commits   float64            // -1: not counted
	rollbacks float64
	shapes    map[string]int64
	providers map[string]int // requests at the simulators, by "provider operation"
	server    map[string]float64
}

// costsBetween is what happened between two readings, over units.
func costsBetween(a, b reading, units int, unit string) *Costs {
	c := &Costs{Units: units, Unit: unit, Interval: b.at.Sub(a.at), Commits: -1}
	if a.actions != nil && b.actions != nil {
		c.Actions = map[string]float64{}
		for k, v := range b.actions {
			if d := v - a.actions[k]; d > 0 {
				c.Actions[k] = d
			}
		}
	}
	if a.server != nil && b.server != nil {
		c.ServerRequests = map[string]float64{}
		for k, v := range b.server {
			if d := v - a.server[k]; d > 0 {
				c.ServerRequests[k] = d
			}
		}
	}
	if a.providers != nil && b.providers != nil {
		c.ProviderRequests = map[string]float64{}
		for k, v := range b.providers {
			if d := v - a.providers[k]; d > 0 {
				c.ProviderRequests[k] = float64(d)
			}
		}
	}
	if a.commits >= 0 && b.commits >= 0 {
		c.Commits = b.commits - a.commits
		c.Rollbacks = b.rollbacks - a.rollbacks
		c.CommitsByShape = map[string]float64{}
		for k, v := range b.shapes {
			if d := v - a.shapes[k]; d > 0 {
				c.CommitsByShape[k] = float64(d)
			}
		}
	}
	return c
}

// read takes a reading once the previous phase has settled: the dev
// server's actions have stopped changing (a workflow can complete its last
// task just after its effects were recorded) and cfg.Settle has passed
// (the workers' trailing statements, such as the outbox relay's).
func (s *stack) read(ctx context.Context, cfg Config) (reading, error) {
	start := time.Now()
	if err := s.workflowsClosed(ctx, 30*time.Second); err != nil {
		cfg.Logf("bench: %v", err)
	}
	if s.metricsURL != "" {
		if err := s.actionsSettled(ctx, min(cfg.Settle+20*time.Second, time.Minute)); err != nil {
			cfg.Logf("bench: %v", err)
		}
	}
	if err := sleepCtx(ctx, cfg.Settle-time.Since(start)); err != nil {
		return reading{}, err
	}
	r := reading{at: time.Now(), commits: float64(s.proxy.commits.Load()), rollbacks: float64(s.proxy.rollbacks.Load()), shapes: s.proxy.shapeCounts(),
		providers: s.providerRequests()}
	if s.proxy.blind.Load() > 0 {
		r.commits = -1 // an encrypted connection: its transactions were not seen
	}
	if s.metricsURL != "" {
		a, sr, err := s.scrapeServer(ctx)
		if err != nil {
			cfg.Logf("bench: actions not counted: %v", err)
		} else {
			r.actions, r.server = a, sr
		}
	}
	return r, nil
}

// xactCommit reads pg_stat_database's xact_commit and xact_rollback of the
// run's database, from the maintenance database so that the reading is
// not one of them.
func (s *stack) xactCommit(ctx context.Context) (commits, rollbacks float64, err error) {
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = s.admin.QueryRow(qctx, `SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = $1`, s.dbName).Scan(&commits, &rollbacks)
	if err != nil {
		return 0, 0, fmt.Errorf("read pg_stat_database: %w", err)
	}
	return commits, rollbacks, nil
}

// CommitCheck compares, over the whole run, Postgres's own count of the
// run database's committed transactions with what the bench's proxies
// counted: the workers' and the reference points' (Proxy) and the
// harness's own queries (Harness). It is read once every connection to the
// database has closed, when every backend has published its counts; what
// neither proxy sees is Postgres's own work there (autovacuum).
type CommitCheck struct {
	XactCommit float64 `json:"xact_commit"`
	Proxy      float64 `json:"proxy"`
	Harness    float64 `json:"harness"`
	// AutoMaintenance is how many autovacuum and autoanalyze runs
	// Postgres made on the database's tables (pg_stat_user_tables), each
	// at least one transaction that no proxy sees; -1 when not read.
	AutoMaintenance float64 `json:"auto_maintenance"`
}

// Difference is the share of xact_commit the bench's count misses (or, when
// negative, adds).
func (c CommitCheck) Difference() float64 {
	if c.XactCommit <= 0 {
		return 0
	}
	return (c.XactCommit - c.Proxy - c.Harness) / c.XactCommit
}

// crossCheck stops the workers, closes the run's pools and compares the
// counts. Nothing may use the database afterwards.
func (s *stack) crossCheck(ctx context.Context) (CommitCheck, error) {
	s.worker.Stop(15 * time.Second)
	for _, p := range s.extra {
		p.Stop(15 * time.Second)
	}
	s.work.Close()
	s.pool.Close()
	c := CommitCheck{Proxy: float64(s.proxy.commits.Load()), Harness: float64(s.harnessProxy.commits.Load())}
	if s.proxy.blind.Load()+s.harnessProxy.blind.Load() > 0 {
		return c, errors.New("an encrypted connection went through the proxy uncounted")
	}
	// A backend publishes its counts as it exits, just after its client
	// has gone.
	var last float64 = -1
	for range 20 {
		if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
			return c, err
		}
		n, _, err := s.xactCommit(ctx)
		if err != nil {
			return c, err
		}
		if n == last {
			break
		}
		last = n
	}
	c.XactCommit = last - s.xactBase
	c.AutoMaintenance = -1
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(cctx, s.dbURL); err == nil {
		_ = conn.QueryRow(cctx, `SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0) FROM pg_stat_user_tables`).Scan(&c.AutoMaintenance)
		_ = conn.Close(cctx)
	}
	return c, nil
}

// workflowsClosed waits until no workflow of the worker's task queue runs
// (visibility's view), so that a workflow whose effects are recorded has
// also completed its last task, and that task's actions are counted.
func (s *stack) workflowsClosed(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	query := fmt.Sprintf("TaskQueue = '%s' AND ExecutionStatus = 'Running'", s.taskQueue)
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := s.temporal.CountWorkflow(cctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: "default", Query: query})
		cancel()
		if err != nil {
			return fmt.Errorf("count the running workflows: %w", err)
		}
		if resp.GetCount() == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d workflows still running after %s", resp.GetCount(), limit)
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// actionsSettled waits until two scrapes half a second apart agree.
func (s *stack) actionsSettled(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	prev, err := s.scrapeActions(ctx)
	for {
		if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
			return err
		}
		cur, cerr := s.scrapeActions(ctx)
		if err == nil && cerr == nil && maps.Equal(prev, cur) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the dev server's actions were still changing after %s", limit)
		}
		prev, err = cur, cerr
	}
}

// scrapeActions reads the dev server's action counter of the default
// namespace by action type.
func (s *stack) scrapeActions(ctx context.Context) (map[string]float64, error) {
	body, err := scrape(ctx, s.metricsURL)
	if err != nil {
		return nil, err
	}
	return counterBy(body, "action", "action_type", map[string]string{"namespace": "default"})
}

// scrapeServer reads the dev server's action counter and its frontend and
// persistence requests by operation (Costs.ServerRequests).
func (s *stack) scrapeServer(ctx context.Context) (actions, requests map[string]float64, err error) {
	body, err := scrape(ctx, s.metricsURL)
	if err != nil {
		return nil, nil, err
	}
	if actions, err = counterBy(body, "action", "action_type", map[string]string{"namespace": "default"}); err != nil {
		return nil, nil, err
	}
	requests = map[string]float64{}
	for _, c := range []struct {
		metric, prefix string
		match          map[string]string
	}{
		{"service_requests", "frontend ", map[string]string{"namespace": "default", "service_name": "frontend"}},
		{"persistence_requests", "persistence ", map[string]string{"namespace": "default"}},
	} {
		by, err := counterBy(body, c.metric, "operation", c.match)
		if err != nil {
			return nil, nil, err
		}
		for op, v := range by {
			requests[c.prefix+op] = v
		}
	}
	return actions, requests, nil
}

// ServerRequestsText renders ServerRequests per unit, largest first, those
// under 0.05 per unit left out.
func (c *Costs) ServerRequestsText() string {
	if c == nil || c.ServerRequests == nil {
		return "not measured"
	}
	big := map[string]float64{}
	for k, v := range c.ServerRequests {
		if c.Units > 0 && v/float64(c.Units) >= 0.05 {
			big[k] = v
		}
	}
	return perUnitText(big, c.Units, func(k string) string { return k })
}

// scrape reads a Prometheus endpoint's text exposition.
func scrape(ctx context.Context, url string) (string, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return string(body), nil
}

// counterBy sums the samples of the counter name in Prometheus's text
// exposition format whose labels include every pair of match, keyed by
// the value of the label key. A counter that has no sample yet is an
// empty map: the server creates a series at its first increment.
func counterBy(text, name, key string, match map[string]string) (map[string]float64, error) {
	out := map[string]float64{}
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		end := strings.IndexAny(line, "{ \t")
		if end < 0 || line[:end] != name {
			continue
		}
		labels := map[string]string{}
		rest := line[end:]
		if rest[0] == '{' {
			var err error
			if labels, rest, err = parseLabels(rest[1:]); err != nil {
				return nil, fmt.Errorf("metric %s: %w in %q", name, err, line)
			}
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("metric %s: no value in %q", name, line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metric %s: value in %q: %w", name, line, err)
		}
		ok := true
		for k, want := range match {
			if labels[k] != want {
				ok = false
				break
			}
		}
		if ok {
			out[labels[key]] += v
		}
	}
	return out, nil
}

// parseLabels parses `a="x",b="y"}` (the part after the opening brace) and
// returns the labels and what follows the closing brace.
func parseLabels(s string) (map[string]string, string, error) {
	labels := map[string]string{}
	for {
		s = strings.TrimLeft(s, " \t,")
		if s == "" {
			return nil, "", errors.New("unterminated labels")
		}
		if s[0] == '}' {
			return labels, s[1:], nil
		}
		eq := strings.IndexByte(s, '=')
		if eq < 0 || len(s) < eq+2 || s[eq+1] != '"' {
			return nil, "", errors.New("malformed label")
		}
		k := strings.TrimSpace(s[:eq])
		s = s[eq+2:]
		var v strings.Builder
		closed := false
		for i := 0; i < len(s); i++ {
			switch c := s[i]; {
			case c == '\\' && i+1 < len(s):
				i++
				switch s[i] {
				case 'n':
					v.WriteByte('\n')
				default:
					v.WriteByte(s[i])
				}
			case c == '"':
				labels[k] = v.String()
				s, closed = s[i+1:], true
			default:
				v.WriteByte(c)
			}
			if closed {
				break
			}
		}
		if !closed {
			return nil, "", errors.New("unterminated label value")
		}
	}
}

// historyEvents is the mean history length of the workflows ids, read
// with DescribeWorkflowExecution, how many were read, and their mean size
// in bytes.
func (s *stack) historyEvents(ctx context.Context, ids []string) (float64, int, float64, error) {
	var sum, n, size int64
	for _, id := range ids {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := s.temporal.WorkflowService().DescribeWorkflowExecution(dctx, &workflowservice.DescribeWorkflowExecutionRequest{
			Namespace: "default", Execution: workflowExecution(id),
		})
		cancel()
		if err != nil {
			return 0, 0, 0, fmt.Errorf("describe workflow %s: %w", id, err)
		}
		sum += resp.GetWorkflowExecutionInfo().GetHistoryLength()
		size += resp.GetWorkflowExecutionInfo().GetHistorySizeBytes()
		n++
	}
	if n == 0 {
		return 0, 0, 0, nil
	}
	return float64(sum) / float64(n), int(n), float64(size) / float64(n), nil
}

func workflowExecution(id string) *commonpb.WorkflowExecution {
	return &commonpb.WorkflowExecution{WorkflowId: id}
}

// short is a one-line summary for the progress log.
func (c *Costs) short() string {
	if c == nil {
		return "not counted"
	}
	return fmt.Sprintf("per %s: %.2f actions (%s), %.2f commits, %.1f history events", c.Unit, c.ActionsPer(), c.ActionsByType(), c.CommitsPer(), c.HistoryEvents)
}

// providerRequests reads the simulators' request counters.
func (s *stack) providerRequests() map[string]int {
	out := map[string]int{}
	for op, n := range s.stripe.Stats().RequestsByOperation {
		out["stripe "+op] = n
	}
	out["sendgrid send"] = s.sendgrid.Stats().Requests
	return out
}

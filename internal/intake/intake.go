package intake

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/metrics"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake/route"
	"github.com/effectively/effectively/internal/leaf/identity"
	"github.com/effectively/effectively/workflows"
)

// Status is what became of a received message.
type Status string

// Statuses of a received message, as Result reports them.
const (
	// StatusStarted: this copy started the message's workflow.
	StatusStarted Status = "started"
	// StatusDuplicate: the message was already received; nothing started.
	StatusDuplicate Status = "duplicate"
	// StatusInvalid: the message cannot be processed; it is quarantined with
	// the reason in Result.Error.
	StatusInvalid Status = "invalid"
	// StatusRecorded: the message is in the inbox and its workflow is left
	// to the dispatcher (Record only).
	StatusRecorded Status = "recorded"
)

// Result is the outcome of one received message.
type Result struct {
	MessageID  string `json:"message_id"`
	WorkflowID string `json:"workflow_id,omitempty"`
	Status     Status `json:"status"`
	Error      string `json:"error,omitempty"`
	// Reason is the quarantine reason of an invalid message
	// (store.ReasonInvalid, store.ReasonTooLarge, store.ReasonPayloadMismatch
	// or store.ReasonMaxDeliver).
	Reason       string `json:"reason,omitempty"`
	QuarantineID int64  `json:"quarantine_id,omitempty"`
}

// Config configures an Intake.
type Config struct {
	// TaskQueue is where workflows are started. Default workflows.DefaultTaskQueue.
	TaskQueue string
	// Logger receives one line per duplicate and quarantined message.
	// Default slog.Default().
	Logger *slog.Logger
	// StartRetries is how often a start refused as ResourceExhausted (the
	// server is busy, or the same ID closed a moment ago) is retried.
	// Default 5.
	StartRetries int
	// EagerStart asks for Temporal's eager workflow start: set it when a
	// worker polling TaskQueue shares this client. Otherwise, or with no
	// free slot, a start is an ordinary one.
	EagerStart bool
	// Routes says, per message type, which consumer handles it and which
	// workflow it starts. Default route.Default().
	Routes *route.Registry
	// Metrics counts the intake's decisions (started, duplicate, and the
	// quarantine reasons). Nil counts nothing.
	Metrics *metrics.Metrics
	// StartRate paces each route's workflow starts, per second, in total
	// over every worker process sharing the database (a bucket in
	// Postgres, reserved a tenth of a second's worth at a time; see pace):
	// a recorded message waits in its route's lane of the fast path for
	// its turn, and past the lane it stays pending in the inbox, recorded
	// and acknowledged, for the Dispatcher, which starts it when the route
	// has room. After an outage the backlog then waits in Postgres instead
	// of flooding Temporal, where its tasks would delay every route's.
	// Zero: no pacing.
	StartRate float64
	// Lines, with LineAhead, holds a route's starts while its requests at
	// the providers' shared rate limits are reserved more than LineAhead
	// ahead (*ratelimit.Lines, fed by this process's own requests, which
	// wait in the line every worker shares): the route's workflows already
	// started keep its providers busy that long, so a start now would only
	// wait in Temporal, behind which every route's tasks wait too. A held
	// message, recorded and acknowledged, its inbox row pending, waits in
	// its route's lane of the fast path (served again once the hold ends)
	// or, past the lane, for the Dispatcher. The pace then follows the
	// limit whatever the number of workers. Nil or a LineAhead of zero: no
	// hold.
	Lines interface {
		Ahead(consumer string) time.Duration
	}
	LineAhead time.Duration
}

// Intake accepts messages from any source.
type Intake struct {
	store  *store.Store
	tc     client.Client
	cfg    Config
	paceMu sync.Mutex
	pace   map[string]*pace // by consumer; see Config.StartRate
	holds  holdSet          // last deliveries held, for their dead letters
}

// New returns an Intake that records in st and starts workflows through tc.
func New(st *store.Store, tc client.Client, cfg Config) (*Intake, error) {
	if st == nil || tc == nil {
		return nil, errors.New("intake: store and temporal client are required")
	}
	if cfg.TaskQueue == "" {
		cfg.TaskQueue = workflows.DefaultTaskQueue
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StartRetries <= 0 {
		cfg.StartRetries = 5
	}
	if cfg.Routes == nil {
		cfg.Routes = route.Default()
	}
	if cfg.StartRate > 0 {
		if _, err := newPace(st, "check", cfg.StartRate); err != nil {
			return nil, fmt.Errorf("intake: start rate: %w", err)
		}
	}
	return &Intake{store: st, tc: tc, cfg: cfg, pace: map[string]*pace{}}, nil
}

// pacer is consumer's start pace (Config.StartRate); nil without pacing.
func (in *Intake) pacer(consumer string) *pace {
	if in.cfg.StartRate <= 0 {
		return nil
	}
	in.paceMu.Lock()
	defer in.paceMu.Unlock()
	p := in.pace[consumer]
	if p == nil {
		p, _ = newPace(in.store, consumer, in.cfg.StartRate) // checked by New
		in.pace[consumer] = p
	}
	return p
}

// held reports whether consumer's starts are held by its line at the
// providers' limits (Config.Lines).
func (in *Intake) held(consumer string) bool {
	return in.cfg.Lines != nil && in.cfg.LineAhead > 0 && in.cfg.Lines.Ahead(consumer) > in.cfg.LineAhead
}

// awaitStart waits for one of consumer's starts (Config.StartRate); an
// error when ctx ends first. The fast path's lanes wait out a hold
// (Config.Lines) before: a held start would keep its starter from the
// other routes' lanes.
func (in *Intake) awaitStart(ctx context.Context, consumer string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if p := in.pacer(consumer); p != nil {
		return p.wait(ctx)
	}
	return nil
}

// admit waits for one of consumer's starts (Config.StartRate) for the
// Dispatcher; false, at once, while the route is held, or when ctx ends
// first (or would before the start's turn): the message stays pending for
// a later pass.
func (in *Intake) admit(ctx context.Context, consumer string) bool {
	if in.held(consumer) {
		return false
	}
	return in.awaitStart(ctx, consumer) == nil
}

// room is how many of consumer's rows the Dispatcher claims for one batch
// (Config.StartRate), at most limit: a second of its pace, none while the
// route is held.
func (in *Intake) room(consumer string, limit int) int {
	if in.held(consumer) {
		return 0
	}
	p := in.pacer(consumer)
	if p == nil {
		return limit
	}
	return min(limit, 1+int(p.perSecond))
}

// Accept handles one raw message from source ("starter", "jetstream", …).
// It returns an error only when the message's fate is not settled (Postgres
// or Temporal unreachable): the caller must then not acknowledge it, so that
// it comes again. Every settled outcome, bad input included, is a Result.
func (in *Intake) Accept(ctx context.Context, raw []byte, source string) (Result, error) {
	m, err := in.cfg.Routes.Decode(raw)
	if err != nil {
		return in.RejectInvalid(ctx, raw, source, err)
	}
	return in.AcceptMessage(ctx, m, source)
}

// RejectInvalid quarantines a message that failed to decode with cause, as
// message.Decode or message.DecodeStream reported it. A message over the
// size limit is quarantined as store.ReasonTooLarge, by its size, the
// SHA-256 of the whole and its first bytes (raw may then be nil: the whole
// is not needed); any other as store.ReasonInvalid with raw as received.
func (in *Intake) RejectInvalid(ctx context.Context, raw []byte, source string, cause error) (Result, error) {
	var me *message.Error
	if errors.As(cause, &me) && me.Oversized != nil {
		o := me.Oversized
		return in.quarantine(ctx, store.QuarantineEntry{
			Source: source, Raw: o.Prefix, Size: o.Size, SHA256: hex.EncodeToString(o.SHA256[:]),
			Reason: store.ReasonTooLarge, Detail: cause.Error(),
		})
	}
	return in.reject(ctx, raw, source, "", "", store.ReasonInvalid, cause)
}

// AcceptMessage is Accept for a message already decoded.
func (in *Intake) AcceptMessage(ctx context.Context, m *message.Message, source string) (Result, error) {
	rec, err := in.RecordMessage(ctx, m, source)
	if err != nil || !rec.Pending {
		return rec.Result, err
	}
	res := rec.Result
	started, err := in.Dispatch(ctx, m)
	if err != nil {
		return Result{}, err
	}
	res.Status = StatusStarted
	if !started {
		in.cfg.Logger.Info("duplicate message: workflow already started", "message_id", m.ID, "workflow_id", res.WorkflowID)
		res.Status = StatusDuplicate
	}
	return res, nil
}

// Dispatch starts the workflow of a recorded message and marks its inbox
// row dispatched. It takes no lock: a dispatcher that starts the same row
// meanwhile gets "already started", which is settled as a duplicate start,
// so the row's workflow starts once either way. On error the row stays
// pending for the Dispatcher.
//
// A workflow that marks its own row (route.Route.WorkflowMarksDispatched)
// is not followed by a mark here once this call started it: its first
// transaction marks the row, one commit fewer per message. A start refused
// as already started is marked here, since the workflow may be past that
// transaction.
func (in *Intake) Dispatch(ctx context.Context, m *message.Message) (started bool, err error) {
	wfID, err := identity.WorkflowID(m.Consumer, m.ID)
	if err != nil {
		return false, err
	}
	if started, err = in.Start(ctx, m); err != nil {
		return false, err
	}
	if r, ok := in.cfg.Routes.ByConsumer(m.Consumer); started && ok && r.WorkflowMarksDispatched {
		return true, nil
	}
	if err := in.store.MarkDispatched(ctx, m.Consumer, m.ID, wfID); err != nil {
		return started, err
	}
	return started, nil
}

// Recorded is the outcome of recording one message in the inbox, before any
// workflow is started.
type Recorded struct {
	// Result reports the message: StatusRecorded when its workflow is still
	// to be started, StatusDuplicate when it was already dispatched,
	// StatusInvalid when it was quarantined.
	Result
	// Message is the decoded message; nil when it is invalid.
	Message *message.Message
	// Pending is true when the inbox row waits for its workflow to start:
	// the message is new, or a copy of one whose start did not happen yet.
	Pending bool
	// New is true when this copy created the inbox row.
	New bool
}

// Record decodes raw and records it in the inbox without starting anything:
// the first half of Accept, for a source that acknowledges the message as
// soon as it is recorded and leaves the start to the dispatcher. Like Accept,
// it returns an error only when the message's fate is not settled.
func (in *Intake) Record(ctx context.Context, raw []byte, source string) (Recorded, error) {
	return in.record(ctx, raw, source, false)
}

// ErrUnknownType marks a message RecordKnown left alone: its type is not in
// this worker's registry.
var ErrUnknownType = errors.New("message type unknown to this worker")

// RecordKnown is Record, except that a message whose type the registry does
// not know is neither recorded nor quarantined: it returns an error
// wrapping ErrUnknownType, so that a source that redelivers hands it back
// for a worker that knows the type (a rolling deploy that adds one). On its
// last delivery the source calls Record, which quarantines it.
func (in *Intake) RecordKnown(ctx context.Context, raw []byte, source string) (Recorded, error) {
	return in.record(ctx, raw, source, true)
}

func (in *Intake) record(ctx context.Context, raw []byte, source string, leaveUnknown bool) (Recorded, error) {
	m, err := in.cfg.Routes.Decode(raw)
	var me *message.Error
	if leaveUnknown && errors.As(err, &me) && me.Code == message.CodeUnknownType {
		return Recorded{}, fmt.Errorf("%w: %w", ErrUnknownType, err)
	}
	if err != nil {
		res, err := in.RejectInvalid(ctx, raw, source, err)
		return Recorded{Result: res}, err
	}
	return in.RecordMessage(ctx, m, source)
}

// RecordMessage is Record for a message already decoded. A message whose ID
// was recorded with a different payload is quarantined as
// store.ReasonPayloadMismatch: neither processed nor dropped. The route's
// effect (route.Spec.Claim: an order's payment, a refund) is claimed in the
// insert's transaction when the insert creates the row; m.Claimed then
// carries the claim into the workflow's input.
func (in *Intake) RecordMessage(ctx context.Context, m *message.Message, source string) (Recorded, error) {
	wfID, err := identity.WorkflowID(m.Consumer, m.ID)
	if err != nil {
		res, err := in.reject(ctx, m.Raw, source, m.Consumer, m.ID, store.ReasonInvalid, err)
		return Recorded{Result: res}, err
	}
	claim := in.cfg.Routes.Claim(m)
	entry := store.InboxEntry{Consumer: m.Consumer, MessageID: m.ID, Payload: m.Raw, PayloadHash: m.Hash(), Source: source,
		Payment: claim.Payment, Refund: claim.Refund}
	row, err := in.store.InsertInbox(ctx, entry)
	if err != nil {
		return Recorded{}, fmt.Errorf("record message %s: %w", m.ID, err)
	}
	if row.Claim > 0 {
		// The insert claimed the route's effect: the workflow's input
		// carries the claim, and its first transaction is the record.
		m.Claimed = &message.Claim{Token: row.Claim, At: row.ClaimedAt, PaymentIntentID: row.PaymentIntentID, Currency: row.Currency}
	}
	if !row.Inserted && row.Mismatch(entry) {
		res, err := in.reject(ctx, m.Raw, source, m.Consumer, m.ID, store.ReasonPayloadMismatch,
			fmt.Errorf("message id %s was already received with a different payload (sha256 %.12s…, this one %.12s…)", m.ID, row.PayloadHash, entry.PayloadHash))
		return Recorded{Result: res}, err
	}
	if row.State == store.InboxDispatched && row.WorkflowID == "" {
		// Settled without a workflow by an earlier dispatcher that could
		// not decode it: a copy, or `quarantine retry`, runs it now.
		reopened, err := in.store.ReopenUnstarted(ctx, m.Consumer, m.ID)
		if err != nil {
			return Recorded{}, fmt.Errorf("record message %s: %w", m.ID, err)
		}
		if reopened {
			row.State = store.InboxPending
		}
	}
	rec := Recorded{
		Result:  Result{MessageID: m.ID, WorkflowID: wfID, Status: StatusRecorded},
		Message: m,
		Pending: row.State == store.InboxPending,
		New:     row.Inserted,
	}
	if !row.Inserted {
		in.cfg.Metrics.IntakeDecision(m.Consumer, metrics.DecisionDuplicate)
	}
	if !rec.Pending {
		in.cfg.Logger.Info("duplicate message", "message_id", m.ID, "consumer", m.Consumer, "source", source)
		rec.Status = StatusDuplicate
	}
	return rec, nil
}

// reject quarantines a message that cannot be processed. A raw longer than
// message.MaxSize (a delivery quarantined after its last try by a stream
// without a size limit of its own, say) is kept like a too_large message:
// its first message.OversizedPrefix bytes, its size and the SHA-256 of the
// whole, under reason. No quarantine row ever holds more than
// message.MaxSize bytes.
func (in *Intake) reject(ctx context.Context, raw []byte, source, consumer, messageID, reason string, cause error) (Result, error) {
	res, _, err := in.rejectFirst(ctx, raw, source, consumer, messageID, reason, cause)
	return res, err
}

// rejectFirst is reject, and reports whether the message created its
// quarantine row (quarantineFirst).
func (in *Intake) rejectFirst(ctx context.Context, raw []byte, source, consumer, messageID, reason string, cause error) (Result, bool, error) {
	q := store.QuarantineEntry{Source: source, Consumer: consumer, MessageID: messageID, Raw: raw, Reason: reason, Detail: cause.Error()}
	if len(raw) > message.MaxSize {
		sum := sha256.Sum256(raw)
		q.Raw, q.Size, q.SHA256 = raw[:message.OversizedPrefix], int64(len(raw)), hex.EncodeToString(sum[:])
	} else if q.MessageID == "" {
		q.MessageID = looseID(raw)
	}
	return in.quarantineFirst(ctx, q)
}

// quarantine keeps q and reports it as an invalid message.
func (in *Intake) quarantine(ctx context.Context, q store.QuarantineEntry) (Result, error) {
	res, _, err := in.quarantineFirst(ctx, q)
	return res, err
}

// quarantineFirst is quarantine, and reports whether q created its row. A
// max_deliver quarantine that finds its row is a copy, counted as a
// duplicate: its broker gave the message up once, and another worker saw
// that too (one's hold of the last delivery, the other's dead letter) or
// the message was published again and given up again.
func (in *Intake) quarantineFirst(ctx context.Context, q store.QuarantineEntry) (Result, bool, error) {
	id, first, err := in.store.QuarantineFirst(ctx, q)
	if err != nil {
		return Result{}, false, fmt.Errorf("quarantine message %q: %w", q.MessageID, err)
	}
	decision := quarantineDecision(q.Reason)
	if !first && q.Reason == store.ReasonMaxDeliver {
		decision = metrics.DecisionDuplicate
	}
	in.cfg.Metrics.IntakeDecision(q.Consumer, decision)
	in.cfg.Logger.Warn("message quarantined", "message_id", q.MessageID, "reason", q.Reason, "quarantine_id", id, "error", q.Detail)
	return Result{MessageID: q.MessageID, Status: StatusInvalid, Error: q.Detail, Reason: q.Reason, QuarantineID: id}, first, nil
}

// quarantineDecision is the metrics decision of a quarantine reason.
func quarantineDecision(reason string) metrics.Decision {
	switch reason {
	case store.ReasonPayloadMismatch:
		return metrics.DecisionPayloadMismatch
	case store.ReasonMaxDeliver:
		return metrics.DecisionMaxDeliver
	default:
		return metrics.DecisionInvalid
	}
}

// looseID returns the "id" of a message that failed validation, when it is a
// usable string, so the result and the quarantine row can name it.
func looseID(raw []byte) string {
	var v struct {
		ID any `json:"id"`
	}
	if json.Unmarshal(raw, &v) != nil {
		return ""
	}
	s, ok := v.ID.(string)
	if !ok || identity.ValidateMessageID(s) != nil {
		return ""
	}
	return s
}

// StartOptions are the options every message's workflow is started with,
// with the search attributes and summary of its route.
//
// The policies are explicit because the defaults are wrong for messages:
//   - WorkflowIDConflictPolicy FAIL: a copy arriving while the first run is
//     still running must not attach to it or terminate it.
//   - WorkflowIDReusePolicy REJECT_DUPLICATE: a copy arriving after the
//     first run closed must not run the message again (the default,
//     ALLOW_DUPLICATE, would).
//   - WorkflowExecutionErrorWhenAlreadyStarted: without it the Go SDK
//     returns the existing run with a nil error, and a copy would look
//     started.
//
// The route's consumer is the workflow's fairness key (its tasks and its
// activities' inherit it): a Temporal server with matching.enableFairness
// dispatches each task queue's tasks to the consumers in turn, so one
// route's backlog does not hold back another's; a server without it
// ignores the key.
func StartOptions(taskQueue string, ws route.WorkflowStart) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                                       ws.ID,
		TaskQueue:                                taskQueue,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		TypedSearchAttributes:                    ws.SearchAttributes,
		StaticSummary:                            ws.Summary,
		StaticDetails:                            ws.Details,
		Priority:                                 temporal.Priority{FairnessKey: ws.Consumer},
	}
}

// Start starts the workflow of m. It reports started=false, with a nil
// error, when the workflow ID was already used (running or closed): that is
// a duplicate, not a failure.
func (in *Intake) Start(ctx context.Context, m *message.Message) (started bool, err error) {
	ws, err := in.cfg.Routes.Start(m)
	if err != nil {
		return false, err
	}
	wfID := ws.ID
	opts := StartOptions(in.cfg.TaskQueue, ws)
	opts.EnableEagerStart = in.cfg.EagerStart
	backoff := 100 * time.Millisecond
	for try := 0; ; try++ {
		_, err = in.tc.ExecuteWorkflow(ctx, opts, ws.Workflow, ws.Input)
		if err == nil {
			in.cfg.Metrics.IntakeDecision(m.Consumer, metrics.DecisionStarted)
			return true, nil
		}
		if temporal.IsWorkflowExecutionAlreadyStartedError(err) {
			return false, nil
		}
		var busy *serviceerror.ResourceExhausted
		if !errors.As(err, &busy) || try >= in.cfg.StartRetries {
			return false, fmt.Errorf("start workflow %s: %w", wfID, err)
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("start workflow %s: %w", wfID, ctx.Err())
		case <-time.After(backoff):
		}
		backoff *= 2
	}
}

// Routes returns the registry the Intake decodes and starts messages with.
func (in *Intake) Routes() *route.Registry { return in.cfg.Routes }

// Store returns the store the Intake records in.
func (in *Intake) Store() *store.Store { return in.store }

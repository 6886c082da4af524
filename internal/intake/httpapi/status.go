package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/leaf/identity"
)

// View is the answer to GET /v1/messages/{consumer}/{id}: what `starter
// status` shows, without personal data (no payload, no email, no effect
// result or error text, no quarantined bytes).
type View struct {
	MessageID  string `json:"message_id"`
	Consumer   string `json:"consumer"`
	WorkflowID string `json:"workflow_id"`
	// Terminal is true once the workflow closed (or Temporal forgot it and
	// Postgres holds the outcome).
	Terminal bool `json:"terminal"`
	// Outcome is the recorded outcome, once there is one.
	Outcome    store.Outcome    `json:"outcome,omitempty"`
	Workflow   *WorkflowView    `json:"workflow,omitempty"`
	Inbox      *InboxView       `json:"inbox,omitempty"`
	Order      *OrderView       `json:"order,omitempty"`
	Payment    *PaymentView     `json:"payment,omitempty"`
	Refund     *RefundView      `json:"refund,omitempty"`
	Effects    []EffectView     `json:"effects"`
	Quarantine []QuarantineView `json:"quarantine,omitempty"`
}

// WorkflowView is the workflow as Temporal describes it, while it remembers it.
type WorkflowView struct {
	Status string `json:"status"`
}

// InboxView is the inbox row without its payload.
type InboxView struct {
	State        store.InboxState `json:"state"`
	Source       string           `json:"source"`
	ReceivedAt   time.Time        `json:"received_at"`
	DispatchedAt *time.Time       `json:"dispatched_at,omitempty"`
	Duplicates   int              `json:"duplicates"`
}

// OrderView is the order.
type OrderView struct {
	ID            int64             `json:"id"`
	Status        store.OrderStatus `json:"status"`
	Amount        int64             `json:"amount"`
	Currency      string            `json:"currency"`
	ReceiptStatus string            `json:"receipt_status"`
}

// PaymentView is the payment, with Stripe's codes but not its message.
type PaymentView struct {
	State           store.PaymentState `json:"state"`
	Amount          int64              `json:"amount"`
	Currency        string             `json:"currency"`
	PaymentIntentID string             `json:"payment_intent_id,omitempty"`
	FailureCode     string             `json:"failure_code,omitempty"`
	DeclineCode     string             `json:"decline_code,omitempty"`
}

// RefundView is the refund.
type RefundView struct {
	State       store.RefundState `json:"state"`
	Amount      int64             `json:"amount"`
	Currency    string            `json:"currency"`
	RefundID    string            `json:"refund_id,omitempty"`
	FailureCode string            `json:"failure_code,omitempty"`
}

// EffectView is one ledger row.
type EffectView struct {
	Key         string            `json:"key"`
	Kind        store.EffectKind  `json:"kind"`
	State       store.EffectState `json:"state"`
	ProviderRef string            `json:"provider_ref,omitempty"`
	UpdatedAt   time.Time         `json:"updated_at"`
}

// QuarantineView is one quarantine row: its reason, not its bytes.
type QuarantineView struct {
	ID         int64     `json:"id"`
	Reason     string    `json:"reason"`
	ReceivedAt time.Time `json:"received_at"`
}

func (a *API) get(w http.ResponseWriter, r *http.Request) {
	info := infoOf(r)
	tok, ok := a.authorize(w, r)
	if !ok {
		return
	}
	consumer, id := r.PathValue("consumer"), r.PathValue("id")
	info.messageID = id
	rt, known := a.in.Routes().ByConsumer(consumer)
	if !known {
		writeProblem(w, newProblem(ProblemNotFound, r, "no route has consumer "+strconv.Quote(consumer)), 0)
		return
	}
	if !tok.May(rt.Type) {
		writeProblem(w, newProblem(ProblemForbiddenType, r, "token "+tok.Name+" may not read "+strconv.Quote(rt.Type)), 0)
		return
	}
	wfID, err := identity.WorkflowID(consumer, id)
	if err != nil {
		p := newProblem(ProblemNotFound, r, err.Error())
		writeProblem(w, p, 0)
		return
	}
	read := func() (store.MessageStatus, bool) {
		ctx, cancel := context.WithTimeout(r.Context(), recordTimeout)
		defer cancel()
		st, err := a.st.Status(ctx, consumer, id)
		if err != nil {
			a.unavailable(w, r, id, err)
			return st, false
		}
		if !st.Known() {
			p := newProblem(ProblemNotFound, r, "")
			p.MessageID = id
			writeProblem(w, p, 0)
			return st, false
		}
		return st, true
	}
	// An unknown message is answered at once: a wait is for a recorded one.
	st, ok := read()
	if !ok {
		return
	}
	if d, ok := a.preferWait(r); ok {
		w.Header().Set("Preference-Applied", "wait="+strconv.Itoa(int(d/time.Second)))
		if a.wait(r.Context(), consumer, id, wfID, d) {
			if st, ok = read(); !ok {
				return
			}
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), recordTimeout)
	defer cancel()
	v := view(st, wfID)
	closed, status := a.describe(ctx, wfID)
	if status != "" {
		v.Workflow = &WorkflowView{Status: status}
	}
	v.Terminal = closed || (status == "" && v.Outcome != "")
	writeJSON(w, http.StatusOK, v)
}

// describe asks Temporal whether the workflow closed; status is "" when
// Temporal does not know it (not started yet, or past its retention).
func (a *API) describe(ctx context.Context, wfID string) (closed bool, status string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	desc, err := a.tc.DescribeWorkflow(ctx, wfID, "")
	if err != nil {
		return false, ""
	}
	s := desc.RawResponse.GetWorkflowExecutionInfo().GetStatus()
	return s != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, s.String()
}

// wait holds until the workflow closes or d passes, on Temporal's long poll
// for the result: a waiter holds no Postgres connection. A workflow
// Temporal does not know (not started yet, or forgotten) is looked for
// again every second, and Postgres asked whether the outcome is recorded.
// At shutdown every wait ends at once: the answer says terminal false, and
// the client asks GET later.
func (a *API) wait(ctx context.Context, consumer, id, wfID string, d time.Duration) (closed bool) {
	if d <= 0 {
		return false
	}
	a.metrics.waiters.Inc()
	defer a.metrics.waiters.Dec()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	defer context.AfterFunc(a.stopping, cancel)()
	for {
		err := a.tc.GetWorkflow(ctx, wfID, "").Get(ctx, nil)
		if ctx.Err() != nil {
			return false
		}
		var (
			closed *temporal.WorkflowExecutionError
			nf     *serviceerror.NotFound
		)
		switch {
		case err == nil || errors.As(err, &closed):
			return true // completed, or failed, cancelled, terminated, timed out
		case errors.As(err, &nf):
			if o, err := a.st.OutcomeOf(ctx, consumer, id); err == nil && o != "" {
				return true
			}
		default:
			a.cfg.Logger.Debug("api: waiting for a workflow", "workflow_id", wfID, "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Second):
		}
	}
}

// view keeps what a client may see of st.
func view(st store.MessageStatus, wfID string) View {
	v := View{MessageID: st.MessageID, Consumer: st.Consumer, WorkflowID: wfID, Effects: []EffectView{}}
	if st.Processed != nil {
		v.Outcome = st.Processed.Outcome
	}
	if in := st.Inbox; in != nil {
		v.Inbox = &InboxView{State: in.State, Source: in.Source, ReceivedAt: in.ReceivedAt, DispatchedAt: in.DispatchedAt, Duplicates: in.Duplicates}
	}
	if o := st.Order; o != nil {
		v.Order = &OrderView{ID: o.ID, Status: o.Status, Amount: o.Amount, Currency: o.Currency, ReceiptStatus: o.ReceiptStatus}
	}
	if p := st.Payment; p != nil {
		v.Payment = &PaymentView{State: p.State, Amount: p.Amount, Currency: p.Currency, PaymentIntentID: p.PaymentIntentID, FailureCode: p.FailureCode, DeclineCode: p.DeclineCode}
	}
	if rf := st.Refund; rf != nil {
		v.Refund = &RefundView{State: rf.State, Amount: rf.Amount, Currency: rf.Currency, RefundID: rf.RefundID, FailureCode: rf.FailureCode}
	}
	for _, e := range st.Effects {
		v.Effects = append(v.Effects, EffectView{Key: e.Key, Kind: e.Kind, State: e.State, ProviderRef: e.ProviderRef, UpdatedAt: e.UpdatedAt})
	}
	for _, q := range st.Quarantine {
		v.Quarantine = append(v.Quarantine, QuarantineView{ID: q.ID, Reason: q.Reason, ReceivedAt: q.ReceivedAt})
	}
	return v
}

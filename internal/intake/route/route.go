// Package route is the one place that names every message type: per type,
// the consumer that handles it, the schema that decodes and validates its
// data, the workflow it starts, that workflow's input, the search
// attributes and summary operators find it by, and the effects it keys.
// The routes are order.placed (OrderPlaced) and order.refund_requested
// (RefundRequested).
//
// The intake, the dispatcher and the starter look a message's type up here
// and name no type themselves. Adding a message type is a schema in
// internal/adapter/message, a workflow and its activities (each registered
// in its own file), one file here that builds its Route with For, and one
// line in Default (docs/routes.md; TestChecklist checks every piece).
package route

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"

	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/leaf/identity"
)

// Spec describes the route of one message type whose schema decodes its
// data into a *T. For turns it into a Route; its functions get the data
// already typed.
type Spec[T any] struct {
	// Type is the message type, the envelope's "type" ("order.placed").
	Type string
	// Consumer handles the type: it keys the inbox, the ledger and, with
	// the message ID, the workflow ID. Never renamed once messages arrived.
	Consumer string
	// Schema decodes and validates the type's data into a *T.
	Schema message.Schema
	// Workflow is the registered workflow type each message starts.
	Workflow string
	// Input builds the workflow's input.
	Input func(m *message.Message, v *T) any
	// SearchAttributes returns the attributes the workflow starts with
	// (not encrypted: no personal data).
	SearchAttributes func(m *message.Message, v *T) temporal.SearchAttributes
	// Describe returns the run's summary and details for the Temporal UI.
	// Optional.
	Describe func(m *message.Message, v *T) (summary, details string)
	// Effects are the effects whose keys the workflow derives: each must be
	// counted by the key-namespace guard (store.OpenEffectRows).
	Effects []identity.Effect
	// WorkflowMarksDispatched: the workflow marks its inbox row dispatched
	// in its first transaction, so the intake does not (see Route).
	WorkflowMarksDispatched bool
	// Claim, optional, is the effect the intake claims in the transaction
	// that records the message (store.InboxEntry.Payment or Refund); none
	// set for none. Input then finds the claim in m.Claimed.
	Claim func(m *message.Message, v *T) store.IntakeClaim
}

// Route is everything the product knows about one message type, with its
// data's type erased. Build it with For.
type Route struct {
	// Type, Consumer, Schema, Workflow and Effects are the Spec's.
	Type     string
	Consumer string
	Schema   message.Schema
	Workflow string
	Effects  []identity.Effect
	// WorkflowMarksDispatched: the workflow marks its inbox row dispatched
	// in its first transaction (a claim, or the record of a payment claimed
	// at intake), so the intake skips that commit; a row whose
	// workflow died first is marked by a later Dispatcher pass.
	WorkflowMarksDispatched bool

	start   func(m *message.Message) (WorkflowStart, error)
	claim   func(m *message.Message) store.IntakeClaim
	missing []string
}

// For returns the route that spec describes. The message's value is
// asserted to *T once, in Registry.Start; a missing function is reported
// by New.
func For[T any](spec Spec[T]) Route {
	r := Route{
		Type: spec.Type, Consumer: spec.Consumer, Schema: spec.Schema, Workflow: spec.Workflow,
		Effects: spec.Effects, WorkflowMarksDispatched: spec.WorkflowMarksDispatched,
	}
	if spec.Input == nil {
		r.missing = append(r.missing, "input")
	}
	if spec.SearchAttributes == nil {
		r.missing = append(r.missing, "search attributes")
	}
	if len(r.missing) > 0 {
		return r
	}
	if spec.Claim != nil {
		r.claim = func(m *message.Message) store.IntakeClaim {
			if v, ok := m.Value.(*T); ok {
				return spec.Claim(m, v)
			}
			return store.IntakeClaim{}
		}
	}
	r.start = func(m *message.Message) (WorkflowStart, error) {
		v, ok := m.Value.(*T)
		if !ok {
			return WorkflowStart{}, fmt.Errorf("message %s: workflow input: type %q carries %T, want %T", m.ID, m.Type, m.Value, v)
		}
		ws := WorkflowStart{Input: spec.Input(m, v), SearchAttributes: spec.SearchAttributes(m, v)}
		if spec.Describe != nil {
			ws.Summary, ws.Details = spec.Describe(m, v)
		}
		return ws, nil
	}
	return r
}

// validate checks that r is complete and its names are usable.
func (r Route) validate() error {
	var errs []error
	if r.Type == "" {
		errs = append(errs, errors.New("type is empty"))
	}
	if err := identity.ValidateConsumer(r.Consumer); err != nil {
		errs = append(errs, fmt.Errorf("consumer: %w", err))
	}
	if !r.Schema.Valid() {
		errs = append(errs, errors.New("schema is missing"))
	} else if r.Schema.Type() != r.Type {
		errs = append(errs, fmt.Errorf("schema validates %q, not %q", r.Schema.Type(), r.Type))
	}
	if r.Workflow == "" {
		errs = append(errs, errors.New("workflow is empty"))
	}
	for _, m := range r.missing {
		errs = append(errs, fmt.Errorf("%s missing", m))
	}
	if r.start == nil && len(r.missing) == 0 {
		errs = append(errs, errors.New("not built with For"))
	}
	if len(r.Effects) == 0 {
		errs = append(errs, errors.New("no effects listed"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("route %q: %w", r.Type, err)
	}
	return nil
}

// Registry holds the routes of every known message type. It is immutable
// once built and safe for concurrent use. It implements message.Types.
type Registry struct {
	byType     map[string]Route
	byConsumer map[string]Route
	names      []string
}

// New returns a registry of routes. Each type and each consumer may appear
// once: a consumer handling two types would mix their workflow IDs.
func New(routes ...Route) (*Registry, error) {
	reg := &Registry{byType: map[string]Route{}, byConsumer: map[string]Route{}}
	for _, r := range routes {
		if err := r.validate(); err != nil {
			return nil, err
		}
		if _, dup := reg.byType[r.Type]; dup {
			return nil, fmt.Errorf("route %q: type registered twice", r.Type)
		}
		if other, dup := reg.byConsumer[r.Consumer]; dup {
			return nil, fmt.Errorf("route %q: consumer %q already handles %q", r.Type, r.Consumer, other.Type)
		}
		reg.byType[r.Type], reg.byConsumer[r.Consumer] = r, r
		reg.names = append(reg.names, r.Type)
	}
	sort.Strings(reg.names)
	return reg, nil
}

// Default returns the product's registry: every message type the worker
// handles. A new type is one line here.
var Default = sync.OnceValue(func() *Registry {
	reg, err := New(
		OrderPlaced(),
		RefundRequested(),
	)
	if err != nil {
		panic(err) // the routes are code: a test builds them
	}
	return reg
})

// Lookup returns the consumer and schema of typ (message.Types).
func (reg *Registry) Lookup(typ string) (consumer string, schema message.Schema, ok bool) {
	r, ok := reg.byType[typ]
	return r.Consumer, r.Schema, ok
}

// Names returns the known types, sorted (message.Types).
func (reg *Registry) Names() []string { return append([]string(nil), reg.names...) }

// Route returns the route of typ.
func (reg *Registry) Route(typ string) (Route, bool) {
	r, ok := reg.byType[typ]
	return r, ok
}

// ByConsumer returns the route whose consumer is consumer.
func (reg *Registry) ByConsumer(consumer string) (Route, bool) {
	r, ok := reg.byConsumer[consumer]
	return r, ok
}

// Routes returns every route, sorted by type.
func (reg *Registry) Routes() []Route {
	out := make([]Route, 0, len(reg.names))
	for _, n := range reg.names {
		out = append(out, reg.byType[n])
	}
	return out
}

// Decode decodes and validates one message of a known type (message.Decode).
func (reg *Registry) Decode(raw []byte) (*message.Message, error) {
	return message.Decode(raw, reg)
}

// DecodeStream decodes a file or pipe of messages of known types
// (message.DecodeStream).
func (reg *Registry) DecodeStream(r io.Reader, fn func(line int, raw []byte, m *message.Message, err error) error) error {
	return message.DecodeStream(r, reg, fn)
}

// WorkflowStart is what starting a message's workflow takes.
type WorkflowStart struct {
	// ID is the workflow ID, identity.WorkflowID(consumer, message ID).
	ID string
	// Consumer is the route's consumer: the workflow's fairness key at
	// Temporal's task queues.
	Consumer string
	// Workflow is the workflow type.
	Workflow string
	// Input is the workflow's input.
	Input any
	// SearchAttributes, Summary and Details go into the start options.
	SearchAttributes temporal.SearchAttributes
	Summary, Details string
}

// Claim returns the effect the intake claims with m's inbox row
// (Spec.Claim), none set for none.
func (reg *Registry) Claim(m *message.Message) store.IntakeClaim {
	r, ok := reg.byType[m.Type]
	if !ok || r.Consumer != m.Consumer || r.claim == nil {
		return store.IntakeClaim{}
	}
	return r.claim(m)
}

// Start returns what starting m's workflow takes. m must have been decoded
// with this registry.
func (reg *Registry) Start(m *message.Message) (WorkflowStart, error) {
	r, ok := reg.byType[m.Type]
	if !ok || r.Consumer != m.Consumer {
		return WorkflowStart{}, fmt.Errorf("message %s: no route for type %q and consumer %q", m.ID, m.Type, m.Consumer)
	}
	id, err := identity.WorkflowID(r.Consumer, m.ID)
	if err != nil {
		return WorkflowStart{}, err
	}
	ws, err := r.start(m)
	if err != nil {
		return WorkflowStart{}, err
	}
	ws.ID, ws.Workflow, ws.Consumer = id, r.Workflow, r.Consumer
	return ws, nil
}

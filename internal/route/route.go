// Package route is the one place that names every message type: per type,
// the consumer that handles it, the schema that decodes and validates its
// data, the workflow it starts, that workflow's input, and the search
// attributes and summary operators find it by.
//
// The intake, the dispatcher and the starter look a message's type up here
// and name no type themselves. Adding a message type is a schema in
// internal/message, a workflow and its activities, and one file here that
// builds its Route, listed in Default (see docs/routes.md).
package route

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"

	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/internal/identity"
	"github.com/effectively/effectively/internal/message"
)

// Route is everything the product knows about one message type.
type Route struct {
	// Type is the message type, the envelope's "type" ("order.placed").
	Type string
	// Consumer handles the type. It keys the inbox and the ledger, and with
	// the message ID it is the workflow ID (identity.WorkflowID): it must
	// never change once messages of the type were received.
	Consumer string
	// Schema decodes and validates the type's data into Message.Value.
	Schema message.Schema
	// Workflow is the workflow type each message starts: a registered name
	// that running histories refer to.
	Workflow string
	// Input builds the workflow's input from a message decoded with Schema.
	Input func(m *message.Message) (any, error)
	// SearchAttributes returns the attributes the workflow starts with. They
	// are not encrypted: no personal data.
	SearchAttributes func(m *message.Message) temporal.SearchAttributes
	// Describe returns the workflow's static summary and details, shown in
	// the Temporal UI. Optional.
	Describe func(m *message.Message) (summary, details string)
	// WorkflowMarksDispatched is true when the workflow marks its message's
	// inbox row dispatched in its own first transaction (OrderPlaced's
	// payment claim): the intake's fast path then does not mark it after
	// the start, which saves a Postgres commit per message. A row whose
	// workflow never gets that far (its worker died first) stays pending
	// until a Dispatcher pass, past its MinAge, finds the workflow already
	// started and marks it.
	WorkflowMarksDispatched bool
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
	if r.Input == nil {
		errs = append(errs, errors.New("input is missing"))
	}
	if r.SearchAttributes == nil {
		errs = append(errs, errors.New("search attributes are missing"))
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
// handles. A new type is added to this list, and nowhere else outside its
// own files.
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
	// Workflow is the workflow type.
	Workflow string
	// Input is the workflow's input.
	Input any
	// SearchAttributes, Summary and Details go into the start options.
	SearchAttributes temporal.SearchAttributes
	Summary, Details string
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
	in, err := r.Input(m)
	if err != nil {
		return WorkflowStart{}, fmt.Errorf("message %s: workflow input: %w", m.ID, err)
	}
	ws := WorkflowStart{ID: id, Workflow: r.Workflow, Input: in, SearchAttributes: r.SearchAttributes(m)}
	if r.Describe != nil {
		ws.Summary, ws.Details = r.Describe(m)
	}
	return ws, nil
}

// valueOf returns m's validated data as a T, or an error naming the type
// that was expected: a route's Input and SearchAttributes only ever see
// messages decoded with its own schema.
func valueOf[T any](m *message.Message) (T, error) {
	v, ok := m.Value.(T)
	if !ok {
		var zero T
		return zero, fmt.Errorf("message %s of type %q carries %T, want %T", m.ID, m.Type, m.Value, zero)
	}
	return v, nil
}

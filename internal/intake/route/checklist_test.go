package route_test

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/intake/route"
	"github.com/effectively/effectively/internal/leaf/identity"
	"github.com/effectively/effectively/workflows"
)

// registeredWorkflows records the names Workflows.Register registers.
type registeredWorkflows struct {
	worker.WorkflowRegistry
	names map[string]bool
}

func (r *registeredWorkflows) RegisterWorkflowWithOptions(_ any, o workflow.RegisterOptions) {
	r.names[o.Name] = true
}

// product is what the checklist of docs/routes.md checks a route against.
type product struct {
	workflows map[string]bool // registered by Workflows.Register
	examples  map[string][]byte
	doc       string // docs/routes.md
}

func readProduct(t *testing.T) product {
	t.Helper()
	wfs, err := workflows.New(workflows.Config{})
	if err != nil {
		t.Fatal(err)
	}
	reg := &registeredWorkflows{names: map[string]bool{}}
	wfs.Register(reg)
	p := product{workflows: reg.names, examples: map[string][]byte{}}
	files, err := filepath.Glob("../../../examples/*.jsonl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(src))
		for sc.Scan() {
			if m, err := route.Default().Decode(sc.Bytes()); err == nil && p.examples[m.Type] == nil {
				p.examples[m.Type] = append([]byte(nil), sc.Bytes()...)
			}
		}
	}
	doc, err := os.ReadFile("../../../docs/routes.md")
	if err != nil {
		t.Fatal(err)
	}
	p.doc = string(doc)
	return p
}

// checklist returns what r misses of docs/routes.md's checklist, beyond
// what route.New refuses (a consumer, a schema of the type, a workflow
// name, the typed input and search attributes, listed effects).
func checklist(p product, r route.Route) []string {
	var miss []string
	reg, err := route.New(r)
	if err != nil {
		return []string{"route.New: " + err.Error()}
	}
	if !p.workflows[r.Workflow] {
		miss = append(miss, "workflow "+r.Workflow+" is not registered by Workflows.Register")
	}
	for _, e := range r.Effects {
		if _, ok := store.OpenEffectsRow(e); !ok {
			miss = append(miss, "effect "+string(e)+" is not counted by the key-namespace guard (store.OpenEffectsRow, openEffectsSQL)")
		}
	}
	if !strings.Contains(p.doc, "`"+r.Type+"`") {
		miss = append(miss, "docs/routes.md does not name the type")
	}
	raw := p.examples[r.Type]
	if raw == nil {
		return append(miss, "no line of examples/*.jsonl has the type")
	}
	m, err := reg.Decode(raw)
	if err != nil {
		return append(miss, "its example does not decode: "+err.Error())
	}
	ws, err := reg.Start(m)
	if err != nil {
		return append(miss, "its example does not start: "+err.Error())
	}
	if ws.Input == nil {
		miss = append(miss, "the workflow input is nil")
	}
	for _, k := range workflows.SearchAttributeKeys() {
		if !ws.SearchAttributes.ContainsKey(k) {
			miss = append(miss, "search attribute "+k.GetName()+" is not set")
		}
	}
	return miss
}

// TestChecklist: every route of route.Default has every piece of the
// checklist in docs/routes.md.
func TestChecklist(t *testing.T) {
	p := readProduct(t)
	for _, r := range route.Default().Routes() {
		for _, miss := range checklist(p, r) {
			t.Errorf("route %q: %s", r.Type, miss)
		}
	}
}

// TestChecklistCatchesMissingPieces: a route missing one piece each time
// fails the checklist, so TestChecklist can fail.
func TestChecklistCatchesMissingPieces(t *testing.T) {
	p := readProduct(t)
	ok := route.RefundRequested()
	spec := func(edit func(*route.Spec[message.RefundRequested])) route.Route {
		s := route.Spec[message.RefundRequested]{
			Type: ok.Type, Consumer: ok.Consumer, Schema: ok.Schema, Workflow: ok.Workflow, Effects: ok.Effects,
			Input: func(m *message.Message, v *message.RefundRequested) any {
				return workflows.OrderRefundInput{Consumer: m.Consumer, MessageID: m.ID, Refund: *v}
			},
			SearchAttributes: func(m *message.Message, v *message.RefundRequested) temporal.SearchAttributes {
				return workflows.SearchAttributes(m.Consumer, m.ID, v.OrderID)
			},
		}
		edit(&s)
		return route.For(s)
	}
	if miss := checklist(p, spec(func(*route.Spec[message.RefundRequested]) {})); len(miss) > 0 {
		t.Fatalf("the complete route misses %q", miss)
	}
	tests := map[string]route.Route{
		"no consumer":          spec(func(s *route.Spec[message.RefundRequested]) { s.Consumer = "" }),
		"no schema":            spec(func(s *route.Spec[message.RefundRequested]) { s.Schema = message.Schema{} }),
		"no input":             spec(func(s *route.Spec[message.RefundRequested]) { s.Input = nil }),
		"no search attributes": spec(func(s *route.Spec[message.RefundRequested]) { s.SearchAttributes = nil }),
		"no effects":           spec(func(s *route.Spec[message.RefundRequested]) { s.Effects = nil }),
		"workflow not registered": spec(func(s *route.Spec[message.RefundRequested]) {
			s.Workflow = "OrderCancelled"
		}),
		"effect not counted by the key-namespace guard": spec(func(s *route.Spec[message.RefundRequested]) {
			s.Effects = append(s.Effects, identity.Effect("cancel"))
		}),
		"search attribute missing": spec(func(s *route.Spec[message.RefundRequested]) {
			s.SearchAttributes = func(m *message.Message, _ *message.RefundRequested) temporal.SearchAttributes {
				return temporal.NewSearchAttributes(workflows.MessageIDKey.ValueSet(m.ID), workflows.ConsumerKey.ValueSet(m.Consumer))
			}
		}),
	}
	without := func(edit func(*product)) product {
		q := product{workflows: map[string]bool{}, examples: map[string][]byte{}, doc: p.doc}
		for k, v := range p.workflows {
			q.workflows[k] = v
		}
		for k, v := range p.examples {
			q.examples[k] = v
		}
		edit(&q)
		return q
	}
	products := map[string]product{
		"Workflows.Register misses the workflow": without(func(q *product) { delete(q.workflows, ok.Workflow) }),
		"no example line":                        without(func(q *product) { delete(q.examples, ok.Type) }),
		"docs/routes.md does not name it":        without(func(q *product) { q.doc = strings.ReplaceAll(q.doc, ok.Type, "") }),
	}
	for name, q := range products {
		if miss := checklist(q, ok); len(miss) == 0 {
			t.Errorf("%s: the checklist passed", name)
		} else {
			t.Logf("%s: %s", name, strings.Join(miss, "; "))
		}
	}
	for name, r := range tests {
		if miss := checklist(p, r); len(miss) == 0 {
			t.Errorf("%s: the checklist passed", name)
		} else {
			t.Logf("%s: %s", name, strings.Join(miss, "; "))
		}
	}
}

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/interceptor"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/intake/jetstream"
	"github.com/effectively/effectively/internal/leaf/identity"
	"github.com/effectively/effectively/internal/leaf/tracing"
	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/workflows"
)

// TestOneTracePerMessage runs two messages through JetStream, the workflow,
// both activities, the providers and Postgres with tracing on and an
// in-memory exporter. The first is published with a traceparent (as
// `starter publish` sets it): its spans continue the publisher's trace. The
// second has none: the intake starts its trace. Each message's trace holds
// the intake, the workflow, the charge and the receipt, both provider calls
// and Postgres queries, every span's parent is in the trace, and no span
// carries the customer's email or payment method.
func TestOneTracePerMessage(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	tracing.Install(tp)
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
	})
	ti, err := tracing.TemporalInterceptor()
	if err != nil {
		t.Fatal(err)
	}
	s := testenv.NewStack(t, testenv.StackOptions{Interceptors: []interceptor.ClientInterceptor{ti}})
	j := testenv.NewJetStream(t, testenv.JetStreamOptions{})
	s.StartProcess(t, j, j.ConsumerConfig(t, 5*time.Second, 5), intake.DispatcherConfig{})

	const (
		email = "grace.hopper@example.com"
		pm    = "pm_card_visa"
	)
	raw := func(id string, orderID int64) []byte {
		return fmt.Appendf(nil, `{"id": %q, "type": "order.placed", "data": {"order_id": %d, "amount": 918273, "currency": "eur", "customer_email": %q, "payment_method": %q}}`, id, orderID, email, pm)
	}
	subject, err := jetstream.PublishSubject(j.Subject, "order.placed")
	if err != nil {
		t.Fatal(err)
	}
	publish := func(ctx context.Context, data []byte) {
		t.Helper()
		msg := nats.NewMsg(subject)
		msg.Data = data
		tracing.Propagator.Inject(ctx, propagation.HeaderCarrier(msg.Header)) // Traceparent, as an HTTP-minded publisher writes it
		pctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := j.JS.PublishMsg(pctx, msg); err != nil {
			t.Fatal(err)
		}
	}

	// The publisher's span: the trace the first message must continue.
	pubCtx, pubSpan := tp.Tracer("publisher").Start(context.Background(), "publish order.placed", trace.WithSpanKind(trace.SpanKindProducer))
	publish(pubCtx, raw("evt_trace1", 9101))
	pubSpan.End()
	publish(context.Background(), raw("evt_trace2", 9102))

	for _, id := range []string{"evt_trace1", "evt_trace2"} {
		if st := waitStarted(t, s, id); st.Outcome != workflows.OutcomeCompleted {
			t.Fatalf("%s: outcome = %+v", id, st)
		}
		expectOnce(t, s, id)
	}

	byTrace := map[trace.TraceID][]tracetest.SpanStub{}
	var first, second trace.TraceID
	// Spans end as their operations return: wait for both workflows' runs
	// and intake spans to be exported.
	testenv.Eventually(t, 20*time.Second, "the spans of both messages", func() bool {
		clear(byTrace)
		first, second = trace.TraceID{}, trace.TraceID{}
		for _, sp := range exp.GetSpans() {
			byTrace[sp.SpanContext.TraceID()] = append(byTrace[sp.SpanContext.TraceID()], sp)
			if sp.Name == "intake receive" {
				switch attr(sp, "effectively.message_id") {
				case "evt_trace1":
					first = sp.SpanContext.TraceID()
				case "evt_trace2":
					second = sp.SpanContext.TraceID()
				}
			}
		}
		return first.IsValid() && second.IsValid() &&
			hasSpan(byTrace[first], "RunWorkflow:"+workflows.OrderPlacedName) && hasSpan(byTrace[second], "RunWorkflow:"+workflows.OrderPlacedName)
	})

	if first != pubSpan.SpanContext().TraceID() {
		t.Errorf("the first message's intake span is in trace %s, not the publisher's %s: the traceparent header was not continued", first, pubSpan.SpanContext().TraceID())
	}
	if first == second {
		t.Fatalf("both messages share trace %s; want one trace per message", first)
	}
	for id, tid := range map[string]trace.TraceID{"evt_trace1": first, "evt_trace2": second} {
		spans := byTrace[tid]
		wfID, _ := identity.WorkflowID(message.ConsumerOrderPlaced, id)
		want := []string{
			"intake receive",
			"StartWorkflow:" + workflows.OrderPlacedName,
			"RunWorkflow:" + workflows.OrderPlacedName,
			"StartActivity:ChargeOrder", "RunActivity:ChargeOrder",
			"StartActivity:SendReceipt", "RunActivity:SendReceipt",
			"stripe POST /v1/payment_intents",
			"sendgrid POST /v3/mail/send",
			"postgres ",
		}
		for _, w := range want {
			if !hasSpan(spans, w) {
				t.Errorf("%s: trace %s has no span %q; spans: %v", id, tid, w, names(spans))
			}
		}
		ids := map[trace.SpanID]bool{}
		byID := map[trace.SpanID]tracetest.SpanStub{}
		for _, sp := range spans {
			ids[sp.SpanContext.SpanID()] = true
			byID[sp.SpanContext.SpanID()] = sp
		}
		// Each call sits under the step that made it: the inbox write under
		// the intake, Stripe and SendGrid under the charge (which sends the
		// receipt under the claim its record took; SendReceipt then returns
		// that outcome with no call), and Postgres queries under the intake
		// and the charge.
		parents := map[string]map[string]bool{}
		for _, sp := range spans {
			if p, ok := byID[sp.Parent.SpanID()]; ok {
				key := strings.Fields(sp.Name)[0]
				if parents[key] == nil {
					parents[key] = map[string]bool{}
				}
				parents[key][strings.TrimSuffix(p.Name, "Locally")] = true
			}
		}
		for child, parent := range map[string][]string{
			"stripe":   {"RunActivity:ChargeOrder"},
			"sendgrid": {"RunActivity:ChargeOrder"},
			"postgres": {"intake receive", "RunActivity:ChargeOrder"},
		} {
			for _, p := range parent {
				if !parents[child][p] {
					t.Errorf("%s: no %s span under %q (parents seen: %v)", id, child, p, parents[child])
				}
			}
		}
		for _, sp := range spans {
			if got := attr(sp, "temporalWorkflowID"); got != "" && got != wfID {
				t.Errorf("%s: span %q of workflow %s is in this message's trace", id, sp.Name, got)
			}
			if p := sp.Parent.SpanID(); p.IsValid() && !ids[p] {
				t.Errorf("%s: span %q has parent %s, which is not in the trace: the trace is broken", id, sp.Name, p)
			}
		}
		// The workflow spans of this message are all here, not in a trace
		// of their own.
		for other, spans := range byTrace {
			if other == tid {
				continue
			}
			for _, sp := range spans {
				if attr(sp, "temporalWorkflowID") == wfID {
					t.Errorf("%s: span %q of its workflow is in another trace %s", id, sp.Name, other)
				}
			}
		}
	}

	// No personal data anywhere: not in attributes, events or statuses.
	for _, sp := range exp.GetSpans() {
		var texts []string
		texts = append(texts, sp.Name, sp.Status.Description)
		for _, kv := range sp.Attributes {
			texts = append(texts, kv.Value.String())
		}
		for _, ev := range sp.Events {
			texts = append(texts, ev.Name)
			for _, kv := range ev.Attributes {
				texts = append(texts, kv.Value.String())
			}
		}
		for _, text := range texts {
			for _, pii := range []string{email, pm, "918273"} {
				if strings.Contains(text, pii) {
					t.Errorf("span %q carries personal data %q in %q", sp.Name, pii, text)
				}
			}
		}
	}
}

func hasSpan(spans []tracetest.SpanStub, prefix string) bool {
	return slices.ContainsFunc(spans, func(sp tracetest.SpanStub) bool { return strings.HasPrefix(sp.Name, prefix) })
}

func names(spans []tracetest.SpanStub) []string {
	out := make([]string, len(spans))
	for i, sp := range spans {
		out[i] = sp.Name
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func attr(sp tracetest.SpanStub, key attribute.Key) string {
	for _, kv := range sp.Attributes {
		if kv.Key == key {
			return kv.Value.String()
		}
	}
	return ""
}

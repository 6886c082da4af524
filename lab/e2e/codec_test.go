package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/effectively/effectively/internal/adapter/message"
	"github.com/effectively/effectively/internal/intake"
	"github.com/effectively/effectively/internal/leaf/codec"
	"github.com/effectively/effectively/internal/leaf/identity"
	"github.com/effectively/effectively/sim/sendgridsim"
	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/workflows"
)

// piiNeedles are what must never be stored in plaintext: the customer's
// email and the JSON field names that give amounts and emails away.
var piiNeedles = []string{"ada@example.com", `"amount"`, `"customer_email"`}

const (
	piiMessageID = "evt_pii"
	piiOrderID   = 61
)

// TestCodecKeepsPIIOutOfHistory runs one order through a stack whose
// clients encrypt payloads, then reads the history as the Temporal server
// stores it, through a client without the codec. The control runs the same
// order and the same inspection without the codec and must find the email:
// it proves the inspection can see plaintext when it is there.
func TestCodecKeepsPIIOutOfHistory(t *testing.T) {
	t.Run("encrypted", func(t *testing.T) {
		keys := newTestKeyring(t)
		dc := codec.NewDataConverter(keys)
		s := testenv.NewStack(t, testenv.StackOptions{DataConverter: dc, FailureConverter: codec.NewFailureConverter(dc)})
		// The receipt is refused three times, matched by recipient: by the
		// send of the charge's local attempt and by the receipt's local
		// attempt (their errors travel as encrypted results), and by the
		// first regular attempt, which leaves a failure in the history; the
		// faults firing prove the activities saw the decrypted address.
		const refusals = 3
		s.Sims.SendGrid.AddFault(sendgridsim.Fault{Match: sendgridsim.Match{To: "ada@example.com"}, Kind: sendgridsim.FaultErrorBefore, Times: refusals})
		wfID := runPIIOrder(t, s)

		// The codec client reads the result.
		st := wait(t, s, piiMessageID)
		if st.Outcome != workflows.OutcomeCompleted || st.OrderID != piiOrderID || st.Payment == nil || st.Payment.PaymentIntentID == "" {
			t.Fatalf("result through the codec client = %+v", st)
		}
		if got := s.Sims.SendGrid.Stats().FaultsFired; got != refusals {
			t.Errorf("sendgrid faults fired = %d, want %d", got, refusals)
		}
		if ms := s.Sims.SendGrid.Messages(); len(ms) != 1 || len(ms[0].To) != 1 || ms[0].To[0] != "ada@example.com" {
			t.Errorf("receipts delivered = %+v, want one to ada@example.com", ms)
		}

		plain := s.Temporal.Client() // the dev server's client: default converter, no codec
		h := scanHistory(t, plain, wfID)
		for needle, where := range h.plaintext {
			t.Errorf("history holds %s in plaintext, in %v", needle, where)
		}
		if len(h.encrypted) < 6 {
			t.Errorf("encrypted payloads in history = %d, want at least 6 (input, 2 activity inputs and results, result, summaries)", len(h.encrypted))
		}
		for _, path := range h.unencrypted {
			t.Errorf("payload not encrypted: %s", path)
		}
		if h.failures == 0 {
			t.Error("history holds no failure: the refused regular attempt should have left one")
		}
		for i, msg := range h.failureMessages {
			if msg != "Encoded failure" {
				t.Errorf("failure message in plaintext at %s: %q", h.failurePaths[i], msg)
			}
		}

		// The static summary (user metadata) is encrypted too, and decrypts.
		if got := string(h.summary.GetMetadata()[converter.MetadataEncoding]); got != codec.EncodingEncrypted {
			t.Errorf("static summary encoding = %q, want %q", got, codec.EncodingEncrypted)
		}
		var summary string
		if err := dc.FromPayload(h.summary, &summary); err != nil || summary != fmt.Sprintf("Order %d from message %s", piiOrderID, piiMessageID) {
			t.Errorf("static summary through the codec = %q, %v", summary, err)
		}

		checkSearchAttributes(t, plain, wfID, h)

		// Without the codec, the stored result cannot be read.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var leaked workflows.Status
		if err := plain.GetWorkflow(ctx, wfID, "").Get(ctx, &leaked); err == nil {
			t.Errorf("a client without the codec read the result: %+v", leaked)
		}

		// The worker's replayer, with the codec, replays what it wrote.
		replay(t, h, dc, codec.NewFailureConverter(dc))

		// An operator with the token reads the stored input through the
		// codec server, as the Temporal UI or CLI would.
		in := decodeThroughCodecServer(t, keys, h.input)
		if in.Order.CustomerEmail != "ada@example.com" || in.Order.Amount != 1999 || in.MessageID != piiMessageID {
			t.Errorf("input decoded by the codec server = %+v", in)
		}
	})

	t.Run("control without codec", func(t *testing.T) {
		s := testenv.NewStack(t, testenv.StackOptions{})
		wfID := runPIIOrder(t, s)
		if st := wait(t, s, piiMessageID); st.Outcome != workflows.OutcomeCompleted {
			t.Fatalf("result = %+v", st)
		}
		h := scanHistory(t, s.Temporal.Client(), wfID)
		if len(h.plaintext["ada@example.com"]) == 0 {
			t.Error("the inspection found no plaintext email in a history written without the codec: it cannot be trusted")
		}
		if len(h.encrypted) != 0 || len(h.unencrypted) == 0 {
			t.Errorf("without the codec: %d encrypted, %d plaintext payloads", len(h.encrypted), len(h.unencrypted))
		}
		if got := string(h.summary.GetMetadata()[converter.MetadataEncoding]); got != converter.MetadataEncodingJSON {
			t.Errorf("static summary encoding = %q, want %q", got, converter.MetadataEncodingJSON)
		}
		checkSearchAttributes(t, s.Temporal.Client(), wfID, h)

		// A history written before the codec was switched on still replays
		// on a worker that has it.
		dc := codec.NewDataConverter(newTestKeyring(t))
		replay(t, h, dc, codec.NewFailureConverter(dc))
	})
}

func newTestKeyring(t *testing.T) *codec.Keyring {
	t.Helper()
	secret := make([]byte, codec.KeySize)
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	keys, err := codec.NewKeyring(codec.Key{ID: "e2e-1", Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// runPIIOrder sends ada@example.com's order through the intake and returns
// its workflow ID.
func runPIIOrder(t *testing.T, s *testenv.Stack) string {
	t.Helper()
	if r := accept(t, s, order(piiMessageID, piiOrderID, "pm_card_visa")); r.Status != intake.StatusStarted {
		t.Fatalf("accept = %+v", r)
	}
	wfID, err := identity.WorkflowID(message.ConsumerOrderPlaced, piiMessageID)
	if err != nil {
		t.Fatal(err)
	}
	return wfID
}

// historyScan is what a history holds, as stored by the server.
type historyScan struct {
	// plaintext maps each of piiNeedles found in an event's wire bytes to
	// the events holding it.
	plaintext map[string][]string
	// encrypted and unencrypted are the paths of the payloads outside search
	// attributes, by whether the codec encrypted them.
	encrypted, unencrypted []string
	// searchAttributes are the payloads of search attributes, which the
	// codec does not touch.
	searchAttributes map[string]*commonpb.Payload
	// failures counts Failure messages; failureMessages are their messages.
	failures        int
	failureMessages []string
	failurePaths    []string
	// summary is the static summary and input the input of the started event.
	summary *commonpb.Payload
	input   *commonpb.Payloads
	// history is the history as read.
	history historypb.History
}

// scanHistory reads a workflow's history through c, which must have no
// codec, and inspects every event's wire form and every payload in it.
func scanHistory(t *testing.T, c client.Client, wfID string) *historyScan {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := &historyScan{plaintext: map[string][]string{}, searchAttributes: map[string]*commonpb.Payload{}}
	it := c.GetWorkflowHistory(ctx, wfID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	n := 0
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatalf("history of %s: %v", wfID, err)
		}
		n++
		h.history.Events = append(h.history.Events, ev)
		name := fmt.Sprintf("event %d %s", ev.GetEventId(), ev.GetEventType())
		raw, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		for _, needle := range piiNeedles {
			if bytes.Contains(raw, []byte(needle)) {
				h.plaintext[needle] = append(h.plaintext[needle], name)
			}
		}
		if a := ev.GetWorkflowExecutionStartedEventAttributes(); a != nil {
			h.input = a.GetInput()
			h.summary = ev.GetUserMetadata().GetSummary()
		}
		h.walk(ev.ProtoReflect(), name)
	}
	if n == 0 || h.input == nil || h.summary == nil {
		t.Fatalf("history of %s: %d events, input %v, summary %v", wfID, n, h.input, h.summary)
	}
	return h
}

// replay replays the scanned history with the workflows as the stack
// registers them, decoding with dc and fc.
func replay(t *testing.T, h *historyScan, dc converter.DataConverter, fc converter.FailureConverter) {
	t.Helper()
	r, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{DataConverter: dc, FailureConverter: fc})
	if err != nil {
		t.Fatal(err)
	}
	wfs, err := workflows.New(workflows.Config{RetryInitialInterval: 100 * time.Millisecond, RetryMaximumInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	wfs.Register(r)
	if err := r.ReplayWorkflowHistory(testenv.Logger(t), &h.history); err != nil {
		t.Errorf("replay: %v", err)
	}
}

// walk visits every message under m, recording payloads and failures.
func (h *historyScan) walk(m protoreflect.Message, path string) {
	switch v := m.Interface().(type) {
	case *commonpb.Payload:
		switch {
		case strings.Contains(path, ".search_attributes."):
			h.searchAttributes[path[strings.LastIndex(path, "[")+1:len(path)-1]] = v
		case string(v.GetMetadata()[converter.MetadataEncoding]) == codec.EncodingEncrypted:
			h.encrypted = append(h.encrypted, path)
		default:
			h.unencrypted = append(h.unencrypted, fmt.Sprintf("%s (%s)", path, v.GetMetadata()[converter.MetadataEncoding]))
		}
		return
	case *failurepb.Failure:
		h.failures++
		h.failureMessages = append(h.failureMessages, v.GetMessage())
		h.failurePaths = append(h.failurePaths, path)
	}
	m.Range(func(fd protoreflect.FieldDescriptor, val protoreflect.Value) bool {
		p := path + "." + string(fd.Name())
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				val.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
					h.walk(mv.Message(), p+"["+k.String()+"]")
					return true
				})
			}
		case fd.IsList():
			if fd.Message() != nil {
				for i := range val.List().Len() {
					h.walk(val.List().Get(i).Message(), fmt.Sprintf("%s[%d]", p, i))
				}
			}
		case fd.Message() != nil:
			h.walk(val.Message(), p)
		}
		return true
	})
}

// checkSearchAttributes asserts that MessageId and OrderId are readable
// without the codec, in the started event and in visibility, and that no
// search attribute carries an email.
func checkSearchAttributes(t *testing.T, plain client.Client, wfID string, h *historyScan) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	desc, err := plain.DescribeWorkflow(ctx, wfID, "")
	if err != nil {
		t.Fatal(err)
	}
	dc := converter.GetDefaultDataConverter()
	for source, attrs := range map[string]map[string]*commonpb.Payload{
		"history":    h.searchAttributes,
		"visibility": desc.RawResponse.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields(),
	} {
		var messageID string
		var orderID int64
		if err := dc.FromPayload(attrs[workflows.MessageIDKey.GetName()], &messageID); err != nil || messageID != piiMessageID {
			t.Errorf("%s: MessageId = %q, %v; want %q readable without the codec", source, messageID, err, piiMessageID)
		}
		if err := dc.FromPayload(attrs[workflows.OrderIDKey.GetName()], &orderID); err != nil || orderID != piiOrderID {
			t.Errorf("%s: OrderId = %d, %v; want %d readable without the codec", source, orderID, err, piiOrderID)
		}
		for name, p := range attrs {
			if bytes.Contains(p.GetData(), []byte("@")) {
				t.Errorf("%s: search attribute %s = %s carries an email", source, name, p.GetData())
			}
		}
	}
}

// decodeThroughCodecServer decrypts payloads through the codec server with
// the operator's token, as the Temporal CLI's --codec-endpoint does.
func decodeThroughCodecServer(t *testing.T, keys *codec.Keyring, ps *commonpb.Payloads) workflows.OrderPlacedInput {
	t.Helper()
	const token = "operator-token-for-the-e2e-test"
	handler, err := codec.NewServerHandler(codec.NewCodec(keys), codec.DefaultCORSOrigins(), token)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	remote := converter.NewRemotePayloadCodec(converter.RemotePayloadCodecOptions{
		Endpoint: srv.URL,
		ModifyRequest: func(r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+token)
			return nil
		},
	})
	dec, err := remote.Decode(ps.GetPayloads())
	if err != nil {
		t.Fatalf("decode through the codec server: %v", err)
	}
	var in workflows.OrderPlacedInput
	if err := converter.GetDefaultDataConverter().FromPayloads(&commonpb.Payloads{Payloads: dec}, &in); err != nil {
		t.Fatal(err)
	}
	return in
}

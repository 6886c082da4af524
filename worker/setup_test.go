package main

import (
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/effectively/effectively/tools/storetest"
	"github.com/effectively/effectively/tools/testenv"
	"github.com/effectively/effectively/workflows"
)

// TestSetupPreparesAFreshNamespace: `worker setup` registers effectively's
// search attributes in a namespace that has none, and a second run changes
// nothing (exit 0 both times). A namespace holding MessageId under another
// type is refused with exit 2, naming the attribute and both types, and the
// attribute is left as it was. A namespace whose retention makes RETENTION
// unsafe is refused with exit 2 too.
func TestSetupPreparesAFreshNamespace(t *testing.T) {
	srv := testenv.StartTemporal(t)
	tc := srv.Client()
	ctx := t.Context()
	register := func(ns string, retention time.Duration) {
		t.Helper()
		if _, err := tc.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
			Namespace: ns, WorkflowExecutionRetentionPeriod: durationpb.New(retention),
		}); err != nil {
			t.Fatal(err)
		}
	}
	custom := func(ns string) map[string]enumspb.IndexedValueType {
		t.Helper()
		resp, err := tc.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetCustomAttributes()
	}
	env := func(ns string) {
		startEnv(t, storetest.NewDatabase(t), "setup-test")
		t.Setenv("TEMPORAL_ADDRESS", srv.FrontendHostPort())
		t.Setenv("TEMPORAL_NAMESPACE", ns)
		t.Setenv("RETENTION", "720h")
	}

	register("fresh", 24*time.Hour)
	if got := custom("fresh"); len(got) != 0 {
		t.Fatalf("a fresh namespace already has %v", got)
	}
	env("fresh")
	for run := 1; run <= 2; run++ {
		if code, log := runCapturing(t, []string{"setup"}); code != 0 {
			t.Fatalf("setup run %d: exit %d\n%s", run, code, log)
		}
		got := custom("fresh")
		for _, k := range workflows.SearchAttributeKeys() {
			if got[k.GetName()] != k.GetValueType() {
				t.Errorf("run %d: %s is %v in the namespace, want %v", run, k.GetName(), got[k.GetName()], k.GetValueType())
			}
		}
	}

	register("conflict", 24*time.Hour)
	if _, err := tc.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: "conflict", SearchAttributes: map[string]enumspb.IndexedValueType{"MessageId": enumspb.INDEXED_VALUE_TYPE_TEXT},
	}); err != nil {
		t.Fatal(err)
	}
	env("conflict")
	code, log := runCapturing(t, []string{"setup"})
	if code != 2 || !strings.Contains(log, "MessageId is registered as Text, effectively needs Keyword") {
		t.Fatalf("setup on a conflicting namespace: exit %d, want 2 naming MessageId and both types\n%s", code, log)
	}
	if got := custom("conflict")["MessageId"]; got != enumspb.INDEXED_VALUE_TYPE_TEXT {
		t.Errorf("MessageId became %v", got)
	}

	register("long", 60*24*time.Hour)
	env("long")
	code, log = runCapturing(t, []string{"setup"})
	if code != 2 || !strings.Contains(log, "shorter than the safe horizon") {
		t.Fatalf("setup with RETENTION under the namespace's retention: exit %d, want 2\n%s", code, log)
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/effectively/effectively/internal/adapter/store"
	"github.com/effectively/effectively/internal/adapter/temporalclient"
	"github.com/effectively/effectively/internal/config"
	"github.com/effectively/effectively/internal/leaf/identity"
	"github.com/effectively/effectively/workflows"
)

// statusReport is what `starter status` prints.
type statusReport struct {
	store.MessageStatus
	Workflow *workflowReport `json:"workflow,omitempty"`
}

type workflowReport struct {
	ID     string `json:"id"`
	RunID  string `json:"run_id,omitempty"`
	Status string `json:"status,omitempty"`
	// Query is the workflow's status query answer, whose shape depends on
	// the message type (workflows.Status, workflows.RefundStatus).
	Query json.RawMessage `json:"query,omitempty"`
	Error string          `json:"error,omitempty"`
}

// cmdStatus prints what Postgres (the lasting record) and, while it still
// remembers the run, Temporal know about a message.
func cmdStatus(ctx context.Context, cfg config.Config, args []string, stdout io.Writer, logger *slog.Logger) (int, error) {
	consumer, id, err := messageArgs("status", args)
	if err != nil {
		return exitUsage, err
	}
	d, err := connect(ctx, cfg, logger, false)
	if err != nil {
		return exitError, err
	}
	defer d.close()
	// The message ID alone names the message: the consumer is the one of
	// the route that has a record of it.
	if consumer, err = messageConsumer(ctx, d.store, consumer, id, store.MessageStatus.Known); err != nil {
		return exitError, err
	}
	st, err := d.store.Status(ctx, consumer, id)
	if err != nil {
		return exitError, err
	}
	wfID, err := identity.WorkflowID(st.Consumer, id)
	if err != nil {
		return exitUsage, fmt.Errorf("%w: %w", errUsage, err)
	}
	rep := statusReport{MessageStatus: st, Workflow: describe(ctx, cfg, wfID, logger)}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return exitError, err
	}
	if !st.Known() {
		return exitNotFound, nil
	}
	return exitOK, nil
}

// describe asks Temporal about the workflow; Temporal forgets closed runs
// after the namespace's retention, so its absence is normal.
func describe(ctx context.Context, cfg config.Config, wfID string, logger *slog.Logger) *workflowReport {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rep := &workflowReport{ID: wfID}
	tc, _, err := temporalclient.Dial(ctx, cfg.Temporal, logger)
	if err != nil {
		rep.Error = err.Error()
		return rep
	}
	defer tc.Close()
	desc, err := tc.DescribeWorkflow(ctx, wfID, "")
	if err != nil {
		rep.Error = err.Error()
		return rep
	}
	info := desc.RawResponse.GetWorkflowExecutionInfo()
	rep.RunID = info.GetExecution().GetRunId()
	rep.Status = info.GetStatus().String()
	val, err := tc.QueryWorkflow(ctx, wfID, "", workflows.StatusQuery)
	if err != nil {
		if !errors.Is(err, context.DeadlineExceeded) {
			rep.Error = "query: " + err.Error()
		}
		return rep
	}
	var q json.RawMessage
	if err := val.Get(&q); err == nil {
		rep.Query = q
	}
	return rep
}

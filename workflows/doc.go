// Package workflows holds effectively's deterministic orchestration: the
// OrderPlaced workflow, its activity options and retry policies, its status
// query and the search attributes an operator uses to find it.
//
// Workflows here never touch Postgres or HTTP; they call activities, whose
// results are recorded in the workflow's history and replayed, never re-run,
// when a worker rebuilds the workflow's state.
package workflows

package tracing

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// PgxTracer is a pgx QueryTracer that makes a client span for each query
// run on behalf of a traced operation. It records the SQL text, whose values
// are placeholders, and never the arguments: they hold customer emails and
// raw messages. A query whose context carries no span (the dispatcher's and
// the relay's polls, pruning) makes no span, so that background work does
// not flood the exporter with one-span traces.
type PgxTracer struct{}

var (
	_ pgx.QueryTracer = PgxTracer{}
	_ pgx.BatchTracer = PgxTracer{}
)

type pgxSpanKey struct{}

// TraceQueryStart starts the query's span when ctx is part of a trace.
func (PgxTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	op := operation(data.SQL)
	ctx, span := Tracer().Start(ctx, "postgres "+op,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("db.system.name", "postgresql"),
			attribute.String("db.operation.name", op),
			attribute.String("db.query.text", data.SQL),
		))
	return context.WithValue(ctx, pgxSpanKey{}, span)
}

// TraceQueryEnd ends the span TraceQueryStart started, if any (see end).
func (PgxTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	span, ok := ctx.Value(pgxSpanKey{}).(trace.Span)
	if !ok {
		return
	}
	span.SetAttributes(attribute.Int64("db.response.rows_affected", data.CommandTag.RowsAffected()))
	end(span, data.Err)
}

// TraceBatchStart starts one span for a batch (the inbox's group commit,
// say: its statements run as one transaction) when ctx is part of a trace,
// with the statements' SQL text, never their arguments.
func (PgxTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() || data.Batch == nil {
		return ctx
	}
	sqls := make([]string, 0, len(data.Batch.QueuedQueries))
	for _, q := range data.Batch.QueuedQueries {
		sqls = append(sqls, q.SQL)
	}
	ctx, span := Tracer().Start(ctx, "postgres BATCH",
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("db.system.name", "postgresql"),
			attribute.String("db.operation.name", "BATCH"),
			attribute.Int("db.operation.batch.size", len(sqls)),
			attribute.String("db.query.text", strings.Join(sqls, ";\n")),
		))
	return context.WithValue(ctx, pgxSpanKey{}, span)
}

// TraceBatchQuery implements pgx.BatchTracer: the batch's span covers its
// statements.
func (PgxTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd ends the span TraceBatchStart started, if any.
func (PgxTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	if span, ok := ctx.Value(pgxSpanKey{}).(trace.Span); ok {
		end(span, data.Err)
	}
}

// end ends span, recording err by its SQLSTATE only: a Postgres message or
// detail can quote the values of a row.
func end(span trace.Span, err error) {
	defer span.End()
	if err == nil || errors.Is(err, pgx.ErrNoRows) {
		return
	}
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr):
		span.SetAttributes(attribute.String("db.response.status_code", pgErr.Code))
		span.SetStatus(codes.Error, "SQLSTATE "+pgErr.Code)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		span.SetStatus(codes.Error, err.Error())
	default:
		span.SetStatus(codes.Error, "query failed")
	}
}

// operation is the first keyword of a statement (SELECT, INSERT, WITH …),
// skipping comments.
func operation(sql string) string {
	s := strings.TrimSpace(sql)
	for strings.HasPrefix(s, "--") {
		_, rest, _ := strings.Cut(s, "\n")
		s = strings.TrimSpace(rest)
	}
	word, _, _ := strings.Cut(s, " ")
	word, _, _ = strings.Cut(word, "\n")
	if word == "" {
		return "query"
	}
	return strings.ToUpper(word)
}

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

var _ pgx.QueryTracer = PgxTracer{}

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

// TraceQueryEnd ends the span TraceQueryStart started, if any. An error is
// recorded by its SQLSTATE only: a Postgres message or detail can quote the
// values of a row.
func (PgxTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	span, ok := ctx.Value(pgxSpanKey{}).(trace.Span)
	if !ok {
		return
	}
	defer span.End()
	span.SetAttributes(attribute.Int64("db.response.rows_affected", data.CommandTag.RowsAffected()))
	if data.Err == nil || errors.Is(data.Err, pgx.ErrNoRows) {
		return
	}
	var pgErr *pgconn.PgError
	switch {
	case errors.As(data.Err, &pgErr):
		span.SetAttributes(attribute.String("db.response.status_code", pgErr.Code))
		span.SetStatus(codes.Error, "SQLSTATE "+pgErr.Code)
	case errors.Is(data.Err, context.Canceled), errors.Is(data.Err, context.DeadlineExceeded):
		span.SetStatus(codes.Error, data.Err.Error())
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

package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"
)

// MigrateCommand is the command that applies the migrations, named in the
// error a process that only reads gives when the schema is behind.
const MigrateCommand = "worker migrate"

// ErrSchemaBehind reports a database whose schema is missing or older than
// the one this binary was built for; *SchemaError holds the versions.
var ErrSchemaBehind = errors.New("database schema is behind")

// SchemaError describes a schema that is missing (Have 0) or older than the
// migrations embedded in this binary (Want).
type SchemaError struct {
	Have, Want int64
}

func (e *SchemaError) Error() string {
	if e.Have == 0 {
		return fmt.Sprintf("the database has no effectively schema (this binary needs version %d): run `%s` with the same DATABASE_URL", e.Want, MigrateCommand)
	}
	return fmt.Sprintf("the database schema is at version %d, this binary needs %d: run `%s` with the same DATABASE_URL", e.Have, e.Want, MigrateCommand)
}

// Is makes errors.Is(err, ErrSchemaBehind) true.
func (e *SchemaError) Is(target error) bool { return target == ErrSchemaBehind }

// SchemaVersion is the newest migration embedded in this binary.
func SchemaVersion() int64 {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		panic(err) // the pattern is valid
	}
	var v int64
	for _, name := range names {
		n, err := goose.NumericComponent(name)
		if err != nil {
			panic(fmt.Sprintf("migration %s: %v", name, err)) // embedded at build time, applied by every test database
		}
		v = max(v, n)
	}
	return v
}

// CheckSchema returns a *SchemaError when the database's schema is missing
// or older than SchemaVersion. It only reads (the goose version table), so a
// read-only role can run it, and it never changes the schema: that is
// Migrate's job, run by the worker. A newer schema is accepted: migrations
// add, so an older binary keeps working while a newer worker rolls out.
func CheckSchema(ctx context.Context, pool *pgxpool.Pool) error {
	want := SchemaVersion()
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, goose.DefaultTablename).Scan(&exists); err != nil {
		return fmt.Errorf("check schema: %w", translate(err))
	}
	if !exists {
		return &SchemaError{Want: want}
	}
	var have int64
	err := pool.QueryRow(ctx, `SELECT coalesce(max(version_id), 0) FROM `+goose.DefaultTablename+` WHERE is_applied`).Scan(&have)
	if err != nil {
		return fmt.Errorf("check schema version: %w", translate(err))
	}
	if have < want {
		return &SchemaError{Have: have, Want: want}
	}
	return nil
}

package store

import (
	"context"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
)

// LatestMigration is the version of the newest migration embedded in this
// binary: the schema version the code expects.
func LatestMigration() int64 {
	var latest int64
	entries, _ := fs.ReadDir(migrations, "migrations")
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		if !ok {
			continue
		}
		if v, err := strconv.ParseInt(num, 10, 64); err == nil && v > latest {
			latest = v
		}
	}
	return latest
}

// SchemaVersion is the newest migration applied to the database, as goose
// records it; 0 when none is.
func (s *Store) SchemaVersion(ctx context.Context) (int64, error) {
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT to_regclass('goose_db_version') IS NOT NULL`).Scan(&exists); err != nil {
		return 0, fmt.Errorf("schema version: %w", translate(err))
	}
	if !exists {
		return 0, nil
	}
	var v int64
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(version_id), 0) FROM goose_db_version WHERE is_applied`).Scan(&v); err != nil {
		return 0, fmt.Errorf("schema version: %w", translate(err))
	}
	return v, nil
}

// CheckReady reports whether Postgres answers and carries the schema this
// binary expects: an error names what is wrong (unreachable, or migrated to
// another version than LatestMigration).
func (s *Store) CheckReady(ctx context.Context) error {
	v, err := s.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	if want := LatestMigration(); v != want {
		return fmt.Errorf("schema at migration %d, this binary expects %d", v, want)
	}
	return nil
}

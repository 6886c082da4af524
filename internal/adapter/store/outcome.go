package store

import (
	"context"
	"errors"
	"fmt"
)

// OutcomeOf returns the recorded outcome of (consumer, messageID), "" while
// its processed row is not written: one indexed read.
func (s *Store) OutcomeOf(ctx context.Context, consumer, messageID string) (Outcome, error) {
	var o Outcome
	err := translate(s.pool.QueryRow(ctx, `SELECT outcome FROM processed_messages WHERE consumer = $1 AND message_id = $2`,
		consumer, messageID).Scan(&o))
	if errors.Is(err, ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("outcome of %s: %w", messageID, err)
	}
	return o, nil
}

package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Order is an orders row.
type Order struct {
	ID            int64       `json:"id"`
	Status        OrderStatus `json:"status"`
	Amount        int64       `json:"amount"`
	Currency      string      `json:"currency"`
	MessageID     string      `json:"message_id"`
	ReceiptStatus string      `json:"receipt_status"`
	CreatedAt     time.Time   `json:"created_at"`
	UpdatedAt     time.Time   `json:"updated_at"`
}

// Processed is a processed_messages row.
type Processed struct {
	Outcome     Outcome   `json:"outcome"`
	OrderID     *int64    `json:"order_id,omitempty"`
	ProcessedAt time.Time `json:"processed_at"`
}

// MessageStatus is everything Postgres knows about one message.
type MessageStatus struct {
	Consumer   string            `json:"consumer"`
	MessageID  string            `json:"message_id"`
	Inbox      *InboxRow         `json:"inbox,omitempty"`
	Processed  *Processed        `json:"processed,omitempty"`
	Order      *Order            `json:"order,omitempty"`
	Payment    *Payment          `json:"payment,omitempty"`
	Refund     *Refund           `json:"refund,omitempty"`
	Effects    []Effect          `json:"effects"`
	Quarantine []QuarantineEntry `json:"quarantine,omitempty"`
}

// Known reports whether any record of the message exists.
func (m MessageStatus) Known() bool {
	return m.Inbox != nil || m.Processed != nil || m.Payment != nil || m.Refund != nil || len(m.Effects) > 0 || len(m.Quarantine) > 0
}

// Status gathers the records of message (consumer, messageID). A message with
// no records returns a MessageStatus whose Known is false.
func (s *Store) Status(ctx context.Context, consumer, messageID string) (MessageStatus, error) {
	st := MessageStatus{Consumer: consumer, MessageID: messageID, Effects: []Effect{}}

	var in InboxRow
	err := s.pool.QueryRow(ctx, `
		SELECT consumer, message_id, payload_sha256, source, state, coalesce(workflow_id, ''), received_at, dispatched_at, duplicates, payload
		  FROM inbox WHERE consumer = $1 AND message_id = $2`, consumer, messageID).
		Scan(&in.Consumer, &in.MessageID, &in.PayloadHash, &in.Source, &in.State, &in.WorkflowID, &in.ReceivedAt, &in.DispatchedAt, &in.Duplicates, &in.Payload)
	if err = translate(err); err == nil {
		st.Inbox = &in
	} else if !errors.Is(err, ErrNotFound) {
		return st, fmt.Errorf("status of %s: inbox: %w", messageID, err)
	}

	var pr Processed
	err = s.pool.QueryRow(ctx, `SELECT outcome, order_id, processed_at FROM processed_messages WHERE consumer = $1 AND message_id = $2`,
		consumer, messageID).Scan(&pr.Outcome, &pr.OrderID, &pr.ProcessedAt)
	if err = translate(err); err == nil {
		st.Processed = &pr
	} else if !errors.Is(err, ErrNotFound) {
		return st, fmt.Errorf("status of %s: processed: %w", messageID, err)
	}

	p, err := s.PaymentOf(ctx, consumer, messageID)
	switch {
	case err == nil:
		st.Payment = &p
	case !errors.Is(err, ErrNotFound):
		return st, fmt.Errorf("status of %s: %w", messageID, err)
	}

	r, err := s.RefundOf(ctx, consumer, messageID)
	switch {
	case err == nil:
		st.Refund = &r
	case !errors.Is(err, ErrNotFound):
		return st, fmt.Errorf("status of %s: %w", messageID, err)
	}

	var orderID *int64
	if st.Payment != nil {
		orderID = &st.Payment.OrderID
	} else if st.Processed != nil {
		orderID = st.Processed.OrderID
	}
	if orderID != nil {
		var o Order
		err = s.pool.QueryRow(ctx, `SELECT id, status, amount, currency, message_id, receipt_status, created_at, updated_at FROM orders WHERE id = $1`, *orderID).
			Scan(&o.ID, &o.Status, &o.Amount, &o.Currency, &o.MessageID, &o.ReceiptStatus, &o.CreatedAt, &o.UpdatedAt)
		if err = translate(err); err == nil {
			st.Order = &o
		} else if !errors.Is(err, ErrNotFound) {
			return st, fmt.Errorf("status of %s: order: %w", messageID, err)
		}
	}

	rows, err := s.pool.Query(ctx, `SELECT `+effectColumns+` FROM effects WHERE consumer = $1 AND message_id = $2 ORDER BY kind DESC`, consumer, messageID)
	if err != nil {
		return st, fmt.Errorf("status of %s: effects: %w", messageID, translate(err))
	}
	defer rows.Close()
	for rows.Next() {
		e, err := scanEffect(rows)
		if err != nil {
			return st, fmt.Errorf("status of %s: effects: %w", messageID, err)
		}
		st.Effects = append(st.Effects, e)
	}
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("status of %s: effects: %w", messageID, translate(err))
	}
	rows.Close()

	// A quarantine row names its consumer when the message decoded; one
	// that did not (invalid) names only the message ID it seemed to carry.
	qrows, err := s.pool.Query(ctx, `SELECT `+quarantineColumns+` FROM quarantine
		 WHERE message_id = $2 AND (consumer = $1 OR consumer IS NULL) ORDER BY id`, consumer, messageID)
	if err != nil {
		return st, fmt.Errorf("status of %s: quarantine: %w", messageID, translate(err))
	}
	if st.Quarantine, err = quarantineRows(qrows); err != nil {
		return st, fmt.Errorf("status of %s: quarantine: %w", messageID, translate(err))
	}
	return st, nil
}

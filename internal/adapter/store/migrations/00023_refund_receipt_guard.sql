-- +goose Up
-- No release sends the receipt of a refund Stripe has not moved money for
-- (pending) or took back (failed). Since 00022 this release records such
-- refunds and refuses their receipts in code; a worker of an earlier release
-- still running during a rolling deploy does not know either state and
-- would claim the receipt and send it. Every release claims a receipt
-- through its ledger row before the send, so the database refuses the
-- claim: a refund receipt's row (an email row whose consumer and message
-- hold a refund, as receipt_event tells them) cannot be created or taken
-- over under a new claim while its refund is pending or failed. The error
-- (SQLSTATE EF001) is retryable to an earlier release, which tries again
-- until the refund succeeded or a worker of this release refuses the
-- receipt for good. An AFTER trigger: it sees the refund as the claiming
-- statement left it, and an insert that met an existing row (ON CONFLICT
-- DO NOTHING) is not refused.
-- +goose StatementBegin
CREATE FUNCTION refund_receipt_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    rstate text;
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.claim = OLD.claim AND NEW.state = OLD.state THEN
        RETURN NULL;
    END IF;
    SELECT r.state INTO rstate FROM refunds r WHERE r.consumer = NEW.consumer AND r.message_id = NEW.message_id;
    IF rstate IN ('pending', 'failed') THEN
        RAISE EXCEPTION 'receipt % refused: its refund is % at Stripe', NEW.key, rstate
            USING ERRCODE = 'EF001';
    END IF;
    RETURN NULL;
END $$;
-- +goose StatementEnd
CREATE TRIGGER effects_refund_receipt_guard AFTER INSERT OR UPDATE OF claim, state ON effects
    FOR EACH ROW WHEN (NEW.kind = 'email' AND NEW.state IN ('claimed', 'in_flight'))
    EXECUTE FUNCTION refund_receipt_guard();

-- +goose Down
DROP TRIGGER effects_refund_receipt_guard ON effects;
DROP FUNCTION refund_receipt_guard();

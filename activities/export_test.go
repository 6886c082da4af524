package activities

import "github.com/effectively/effectively/internal/adapter/email"

// RequestHash exposes requestHash to tests.
func RequestHash(v any) string { return requestHash(v) }

// LegacyRefundMail is the refund receipt as it was built under the legacy
// ledger key "email:<message id>", for tests of the deploy.
func LegacyRefundMail(to string, in RefundReceiptInput) (email.Mail, string) {
	m := refundMail("email:"+in.MessageID, to, in)
	return m, requestHash(m)
}

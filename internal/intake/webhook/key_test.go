package webhook_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/effectively/effectively/internal/intake/webhook"
)

// TestSendGridKeyOfAnotherKindIsRefused: an Ed25519 key pasted where
// SendGrid's ECDSA key belongs is refused with the variable's name, and the
// worker does not panic (sendgrid-go's reader asserts the type unchecked).
func TestSendGridKeyOfAnotherKindIsRefused(t *testing.T) {
	b64 := func(pub any) string {
		der, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			t.Fatal(err)
		}
		return base64.StdEncoding.EncodeToString(der)
	}
	edPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecPriv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("a non-ECDSA key panicked: %v", r)
		}
	}()
	err = webhook.Config{SendGridPublicKey: b64(edPub)}.Validate()
	if err == nil || !strings.Contains(err.Error(), "SENDGRID_WEBHOOK_PUBLIC_KEY") {
		t.Fatalf("Validate of an Ed25519 key = %v, want it refused naming SENDGRID_WEBHOOK_PUBLIC_KEY", err)
	}
	if err := (webhook.Config{SendGridPublicKey: b64(&ecPriv.PublicKey)}).Validate(); err != nil {
		t.Fatalf("Validate of an ECDSA key = %v", err)
	}
}

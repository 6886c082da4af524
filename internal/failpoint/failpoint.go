// Package failpoint lets tests kill the real worker process at a named point
// of the code path — between a provider's answer and the commit that records
// it, say — to prove what happens in each crash window.
//
// Failpoints are inert unless the process was started with
// EFFECTIVELY_FAILPOINTS set, which only test configuration does:
//
//	EFFECTIVELY_FAILPOINTS=payment.after_charge,email.after_send
//
// An armed failpoint sends SIGKILL to its own process the first time it is
// hit: no deferred function runs, no transaction commits, no connection is
// closed politely — as when the machine loses power. An unarmed Hit costs one
// atomic load.
package failpoint

import (
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// EnvVar names the variable that arms failpoints.
const EnvVar = "EFFECTIVELY_FAILPOINTS"

// The failpoints in the code path, in the order a message meets them.
const (
	// IntakeAfterInsert: the inbox row is committed, the broker not yet acked.
	IntakeAfterInsert = "intake.after_insert"
	// PaymentAfterClaim: the order is claimed, Stripe not yet called.
	PaymentAfterClaim = "payment.after_claim"
	// PaymentAfterCreate: the PaymentIntent is created (unconfirmed), its
	// ID not yet recorded.
	PaymentAfterCreate = "payment.after_create"
	// PaymentAfterCharge: Stripe charged, the result not yet recorded.
	PaymentAfterCharge = "payment.after_charge"
	// PaymentAfterRecord: the payment is committed, the activity not completed.
	PaymentAfterRecord = "payment.after_record"
	// EmailAfterSend: SendGrid accepted the receipt, the ledger not yet updated.
	EmailAfterSend = "email.after_send"
	// OutboxAfterPublish: the event is published, its row not yet marked.
	OutboxAfterPublish = "outbox.after_publish"
)

var (
	armed   atomic.Bool
	mu      sync.Mutex
	enabled map[string]bool
)

func init() {
	Arm(os.Getenv(EnvVar))
}

// Arm enables the comma-separated failpoints in list (replacing any armed
// before). An empty list disarms all.
func Arm(list string) {
	mu.Lock()
	defer mu.Unlock()
	enabled = map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		if name = strings.TrimSpace(name); name != "" {
			enabled[name] = true
		}
	}
	armed.Store(len(enabled) > 0)
}

// Hit kills the process if name is armed.
func Hit(name string) {
	if !armed.Load() {
		return
	}
	mu.Lock()
	on := enabled[name]
	mu.Unlock()
	if on {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

// Armed reports whether name is armed.
func Armed(name string) bool {
	mu.Lock()
	defer mu.Unlock()
	return enabled[name]
}

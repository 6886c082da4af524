//go:build failpoints

package failpoint

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

func TestArm(t *testing.T) {
	defer Arm("")
	Arm(" payment.after_charge , email.after_send")
	if !Armed(PaymentAfterCharge) || !Armed(EmailAfterSend) || Armed(PaymentAfterClaim) {
		t.Fatal("wrong failpoints armed")
	}
	Arm("")
	if Armed(PaymentAfterCharge) || armed.Load() {
		t.Fatal("Arm(\"\") did not disarm")
	}
	Hit(PaymentAfterCharge) // inert: must return
}

// TestHitKillsTheProcess runs this test binary again with a failpoint armed
// and checks the child died of SIGKILL at the point.
func TestHitKillsTheProcess(t *testing.T) {
	if os.Getenv("FAILPOINT_CHILD") == "1" {
		Hit(PaymentAfterCharge)
		os.Exit(0) // not reached when the failpoint works
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestHitKillsTheProcess$") //nolint:gosec // re-runs this test binary, named by the test runner
	cmd.Env = append(os.Environ(), "FAILPOINT_CHILD=1", EnvVar+"="+PaymentAfterCharge)
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child: %v, want killed", err)
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok {
		t.Fatalf("child status %T, want syscall.WaitStatus", ee.Sys())
	}
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child status %v, want SIGKILL", ws)
	}
}

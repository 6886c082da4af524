package failpoint

import (
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
	cmd := exec.Command(os.Args[0], "-test.run", "^TestHitKillsTheProcess$")
	cmd.Env = append(os.Environ(), "FAILPOINT_CHILD=1", EnvVar+"="+PaymentAfterCharge)
	err := cmd.Run()
	ee, ok := err.(*exec.ExitError)
	if !ok {
		t.Fatalf("child: %v, want killed", err)
	}
	ws := ee.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child status %v, want SIGKILL", ws)
	}
}

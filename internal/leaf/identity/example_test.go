package identity_test

import (
	"fmt"

	"github.com/effectively/effectively/internal/leaf/identity"
)

func Example() {
	wf, _ := identity.WorkflowID("order-placed", "evt_91c2")
	pay, _ := identity.Key(identity.EffectPayment, "evt_91c2")
	mail, _ := identity.Key(identity.EffectEmail, "evt_91c2")
	fmt.Println(wf)
	fmt.Println(pay)
	fmt.Println(mail)
	// Output:
	// order-placed/evt_91c2
	// payment:evt_91c2
	// email:evt_91c2
}

func ExampleScope() {
	pay := identity.MustKey(identity.EffectPayment, "evt_91c2")
	none, _ := identity.Scope("", pay)
	eu, _ := identity.Scope("eu", pay)
	fmt.Println(none)
	fmt.Println(eu)
	// Output:
	// payment:evt_91c2
	// eu/payment:evt_91c2
}

package activities

import (
	"context"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
)

// recordingRegistry notes what Register registers.
type recordingRegistry struct {
	worker.ActivityRegistry
	names map[string]any
}

func (r *recordingRegistry) RegisterActivityWithOptions(fn any, o activity.RegisterOptions) {
	r.names[o.Name] = fn
}

// TestRegisterListsEveryActivity checks that every exported method with an
// activity's shape is registered, under a constant equal to the method's
// name: histories recorded when activities were registered by method name
// keep replaying, and a method added without a registered name fails here
// rather than at run time.
func TestRegisterListsEveryActivity(t *testing.T) {
	a := &Activities{}
	reg := &recordingRegistry{names: map[string]any{}}
	Register(reg, a)

	ctxType := reflect.TypeFor[context.Context]()
	errType := reflect.TypeFor[error]()
	typ := reflect.TypeOf(a)
	methods := map[string]bool{}
	for i := range typ.NumMethod() {
		m := typ.Method(i)
		ft := m.Type // receiver first
		if ft.NumIn() != 3 || ft.In(1) != ctxType || ft.NumOut() != 2 || ft.Out(1) != errType {
			continue
		}
		methods[m.Name] = true
		if _, ok := reg.names[m.Name]; !ok {
			t.Errorf("activity method %s is not registered under its name", m.Name)
		}
	}
	for name, fn := range reg.names {
		fname := runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name()
		method := strings.TrimSuffix(fname[strings.LastIndex(fname, ".")+1:], "-fm")
		if method != name {
			t.Errorf("name %q registers method %s: a registered name must equal its method's", name, method)
		}
		if !methods[name] {
			t.Errorf("registered name %q is not an activity method", name)
		}
	}
	for _, want := range []string{"ChargeOrder", "ChargeOrderLocally", "SendReceipt", "SendReceiptLocally", "Prune", "RefundOrder", "SendRefundReceipt", "RefundOrderLocally", "SendRefundReceiptLocally"} {
		if _, ok := reg.names[want]; !ok {
			t.Errorf("%s is not registered: running histories refer to it", want)
		}
	}
}

package activities

import (
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
)

// Activity type names (ChargeOrderName, …) are constants in each
// activity's own file. Running histories refer to an activity by the name it
// was scheduled under, so each is a constant that a Go rename cannot change;
// workflows schedule activities by these names, never by a method value.
// They equal the method names the activities were first registered under,
// so histories recorded before they were constants replay.

// registered maps each activity name to its method; each activity's file
// adds its own entries from init (register), so a new activity touches only
// its own file.
var registered = map[string]func(a *Activities) any{}

// register adds the activity name, whose method fn returns.
func register(name string, fn func(a *Activities) any) {
	if _, dup := registered[name]; dup {
		panic("activity " + name + " registered twice")
	}
	registered[name] = fn
}

// Register registers every activity of a with r under its constant name.
// A new exported method of Activities is an activity only once its file
// registers it (TestRegisterListsEveryActivity checks that none is forgotten). It is
// a function, not a method: every exported method of Activities must be an
// activity, or registering the struct as a whole would fail.
func Register(r worker.ActivityRegistry, a *Activities) {
	for name, fn := range a.activities() {
		r.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
}

// activities maps each activity name to its method.
func (a *Activities) activities() map[string]any {
	out := make(map[string]any, len(registered))
	for name, fn := range registered {
		out[name] = fn(a)
	}
	return out
}

package effect_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/effectively/effectively/internal/effect"
	"github.com/effectively/effectively/internal/leaf/deadline"
	"github.com/effectively/effectively/internal/leaf/identity"
)

func TestAttemptFirst(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	window := 23 * time.Hour
	for _, tt := range []struct {
		name string
		at   effect.Attempt
		want effect.Step
	}{
		{"first claim", effect.Attempt{Claim: 1, ClaimedAt: now.Add(-48 * time.Hour), KeyWindow: window}, effect.StepCall},
		{"retry inside the window replays", effect.Attempt{Claim: 2, ClaimedAt: now.Add(-time.Hour), KeyWindow: window}, effect.StepCall},
		{"retry past the window looks up", effect.Attempt{Claim: 2, ClaimedAt: now.Add(-24 * time.Hour), KeyWindow: window}, effect.StepLookup},
		{"no key at the provider: a retry looks up", effect.Attempt{Claim: 2, ClaimedAt: now}, effect.StepLookup},
		{"no key, first claim", effect.Attempt{Claim: 1, ClaimedAt: now}, effect.StepCall},
	} {
		if got := tt.at.First(now); got != tt.want {
			t.Errorf("%s: First = %s, want %s", tt.name, got, tt.want)
		}
	}
}

// fake is an effect kind whose provider is a map: what exists there, and
// the error the next call answers.
type fake struct {
	exists   *string // the provider's record, nil for none
	callErr  error
	class    effect.Class
	calls    int
	lookups  int
	recorded []string
	refused  []error
	foreign  []string
	unfound  int
}

func (f *fake) Call(context.Context) (string, error) {
	f.calls++
	if f.callErr != nil {
		return "", f.callErr
	}
	v := "made"
	f.exists = &v
	return v, nil
}

func (f *fake) Lookup(context.Context) (string, error) {
	f.lookups++
	if f.exists == nil {
		return "", fmt.Errorf("fake: %w", effect.ErrNotFound)
	}
	return *f.exists, nil
}

func (f *fake) Differs(found string) string {
	if found == "other" {
		return "amount differs"
	}
	return ""
}

func (f *fake) Classify(error) effect.Class { return f.class }

func (f *fake) Record(_ context.Context, p string, via effect.Via) (string, error) {
	f.recorded = append(f.recorded, p+" via "+string(via))
	return p, nil
}

func (f *fake) Refused(_ context.Context, cause error) (string, error) {
	f.refused = append(f.refused, cause)
	return "refused", nil
}

func (f *fake) Foreign(_ context.Context, found, reason string) (string, error) {
	f.foreign = append(f.foreign, found+": "+reason)
	return "", errors.New("foreign")
}

func (f *fake) Unfound(context.Context, error) (string, error) {
	f.unfound++
	return "unfound", nil
}

func str(s string) *string { return &s }

// TestRun runs the protocol's answers against a fake provider: each case
// says what the provider holds and answers, and what must be called and
// recorded.
func TestRun(t *testing.T) {
	now := time.Now()
	retry := effect.Attempt{Claim: 2, ClaimedAt: now.Add(-25 * time.Hour), KeyWindow: 23 * time.Hour}
	copyInWindow := effect.Attempt{Claim: 2, ClaimedAt: now, KeyWindow: 23 * time.Hour}
	first := effect.Attempt{Claim: 1, ClaimedAt: now, KeyWindow: 23 * time.Hour}
	boom := errors.New("boom")
	for _, tt := range []struct {
		name                    string
		at                      effect.Attempt
		kind                    fake
		wantCalls, wantLookups  int
		wantRecorded            []string
		wantClass               effect.Class
		wantRefused, wantForeig int
		wantUnfound             int
	}{
		{name: "first attempt calls and records", at: first, wantCalls: 1, wantRecorded: []string{"made via call"}},
		{name: "lost answer past the key window: found, adopted, no call", at: retry, kind: fake{exists: str("made")},
			wantLookups: 1, wantRecorded: []string{"made via lookup"}},
		{name: "lost answer past the key window, never made: called once", at: retry,
			wantCalls: 1, wantLookups: 1, wantRecorded: []string{"made via call"}},
		{name: "a copy inside the key window calls again (the key replays)", at: copyInWindow, kind: fake{exists: str("made")},
			wantCalls: 1, wantRecorded: []string{"made via call"}},
		{name: "a find with other terms is not adopted", at: retry, kind: fake{exists: str("other")},
			wantLookups: 1, wantForeig: 1},
		{name: "auth error: retried, alerting, nothing recorded", at: first, kind: fake{callErr: boom, class: effect.ClassAlert},
			wantCalls: 1, wantClass: effect.ClassAlert},
		{name: "transient: retried", at: first, kind: fake{callErr: boom, class: effect.ClassRetry},
			wantCalls: 1, wantClass: effect.ClassRetry},
		{name: "mismatch: final", at: first, kind: fake{callErr: boom, class: effect.ClassMismatch},
			wantCalls: 1, wantClass: effect.ClassMismatch},
		{name: "refused: recorded", at: first, kind: fake{callErr: boom, class: effect.ClassRefused},
			wantCalls: 1, wantRefused: 1},
		{name: "ambiguous, made: adopted", at: first, kind: fake{callErr: boom, class: effect.ClassAmbiguous, exists: str("made")},
			wantCalls: 1, wantLookups: 1, wantRecorded: []string{"made via lookup"}},
		{name: "ambiguous, not made: unfound", at: first, kind: fake{callErr: boom, class: effect.ClassAmbiguous},
			wantCalls: 1, wantLookups: 1, wantUnfound: 1},
		{name: "not sent, too late, whatever Classify says: deferred, no lookup", at: first,
			kind:      fake{callErr: fmt.Errorf("stripe: %w", &deadline.TooLateError{What: "confirm"}), class: effect.ClassAmbiguous},
			wantCalls: 1, wantClass: effect.ClassDeferred},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k := tt.kind
			_, err := effect.Run(context.Background(), tt.at, now, effect.Kind[string, string](&k))
			if got := effect.ClassOf(err); got != tt.wantClass {
				t.Errorf("error %v of class %q, want %q", err, got, tt.wantClass)
			}
			if k.calls != tt.wantCalls || k.lookups != tt.wantLookups {
				t.Errorf("%d calls, %d lookups; want %d, %d", k.calls, k.lookups, tt.wantCalls, tt.wantLookups)
			}
			if fmt.Sprint(k.recorded) != fmt.Sprint(tt.wantRecorded) || len(k.refused) != tt.wantRefused ||
				len(k.foreign) != tt.wantForeig || k.unfound != tt.wantUnfound {
				t.Errorf("recorded %v, refused %v, foreign %v, unfound %d; want %v, %d, %d, %d",
					k.recorded, k.refused, k.foreign, k.unfound, tt.wantRecorded, tt.wantRefused, tt.wantForeig, tt.wantUnfound)
			}
		})
	}
}

// TestBeginOnADrainingWorker: a closed Drainer refuses new effects before
// they claim anything; one in flight keeps a context the caller's
// cancellation does not reach, and Wait returns once it ends.
func TestBeginOnADrainingWorker(t *testing.T) {
	var d effect.Drainer
	ctx, cancel := context.WithCancel(context.Background())
	ectx, end, err := effect.Begin(ctx, &d)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if ectx.Err() != nil {
		t.Fatalf("the effect's context ended with the caller's: %v", ectx.Err())
	}
	d.Close()
	if _, _, err := effect.Begin(context.Background(), &d); !errors.Is(err, effect.ErrDraining) {
		t.Fatalf("Begin on a closed Drainer = %v, want ErrDraining", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if n, err := d.Wait(context.Background()); n != 0 || err != nil {
			t.Errorf("Wait = %d, %v", n, err)
		}
	}()
	end()
	<-done
}

// TestNamesNeverShareAKey: each effect kind has its own name, so the keys
// of two kinds for one message ID never meet (identity.Key is injective).
func TestNamesNeverShareAKey(t *testing.T) {
	seen := map[string]identity.Effect{}
	for _, n := range append(effect.Names, identity.EffectPaymentIntent) {
		k := identity.MustKey(n, "evt_same")
		if other, ok := seen[k]; ok {
			t.Fatalf("%s and %s share the key %s", n, other, k)
		}
		seen[k] = n
	}
	if len(seen) != 5 {
		t.Fatalf("%d keys, want 5", len(seen))
	}
}

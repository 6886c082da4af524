package workflows

import (
	"strings"
	"testing"
)

// TestSearchAttributeFlags: the dev server registers each attribute with
// the type the workflows set it with.
func TestSearchAttributeFlags(t *testing.T) {
	got := strings.Join(SearchAttributeFlags(), " ")
	want := "--search-attribute MessageId=Keyword --search-attribute Consumer=Keyword --search-attribute OrderId=Int"
	if got != want {
		t.Fatalf("SearchAttributeFlags() = %q, want %q", got, want)
	}
}

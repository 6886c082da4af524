package workflows

import (
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/effectively/effectively/internal/temporalclient"
)

// Search attributes set on every workflow at start, so an operator can paste
// a message ID into the Temporal UI and find its workflow. They carry no
// personal data: search attributes are not encrypted by a payload codec.
var (
	// MessageIDKey is the message's ID (Keyword "MessageId").
	MessageIDKey = temporal.NewSearchAttributeKeyKeyword("MessageId")
	// ConsumerKey is the consumer handling the message (Keyword "Consumer").
	ConsumerKey = temporal.NewSearchAttributeKeyKeyword("Consumer")
	// OrderIDKey is the order the message is about (Int "OrderId").
	OrderIDKey = temporal.NewSearchAttributeKeyInt64("OrderId")
)

// SearchAttributeFlags are the dev server flags that register the search
// attributes above.
func SearchAttributeFlags() []string {
	return []string{
		"--search-attribute", "MessageId=Keyword",
		"--search-attribute", "Consumer=Keyword",
		"--search-attribute", "OrderId=Int",
	}
}

// SearchAttributes returns the attributes of a message's workflow.
func SearchAttributes(consumer, messageID string, orderID int64) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(
		MessageIDKey.ValueSet(messageID),
		ConsumerKey.ValueSet(consumer),
		OrderIDKey.ValueSet(orderID),
	)
}

// SearchAttributeDefs lists the custom search attributes with their types,
// for registration.
func SearchAttributeDefs() []temporalclient.SearchAttribute {
	return []temporalclient.SearchAttribute{
		{Name: MessageIDKey.GetName(), Type: enumspb.INDEXED_VALUE_TYPE_KEYWORD},
		{Name: ConsumerKey.GetName(), Type: enumspb.INDEXED_VALUE_TYPE_KEYWORD},
		{Name: OrderIDKey.GetName(), Type: enumspb.INDEXED_VALUE_TYPE_INT},
	}
}

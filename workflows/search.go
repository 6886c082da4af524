package workflows

import (
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
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

// SearchAttributeKeys lists the custom search attributes, for registration.
func SearchAttributeKeys() []temporal.SearchAttributeKey {
	return []temporal.SearchAttributeKey{MessageIDKey, ConsumerKey, OrderIDKey}
}

// SearchAttributeFlags are the dev server flags that register the search
// attributes above ("--search-attribute MessageId=Keyword", …).
func SearchAttributeFlags() []string {
	cli := map[enumspb.IndexedValueType]string{
		enumspb.INDEXED_VALUE_TYPE_KEYWORD: "Keyword",
		enumspb.INDEXED_VALUE_TYPE_INT:     "Int",
	}
	var flags []string
	for _, k := range SearchAttributeKeys() {
		flags = append(flags, "--search-attribute", k.GetName()+"="+cli[k.GetValueType()])
	}
	return flags
}

// SearchAttributes returns the attributes of a message's workflow.
func SearchAttributes(consumer, messageID string, orderID int64) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(
		MessageIDKey.ValueSet(messageID),
		ConsumerKey.ValueSet(consumer),
		OrderIDKey.ValueSet(orderID),
	)
}

// Package vocabulary holds a test that keeps the product's typed names in
// one vocabulary: an outcome, decision or stage constant, or an error type,
// is named for its value (see vocabulary_test.go).
package vocabulary

// Package layout holds the test of the product's floors: which package may
// import which (layout_test.go). It has no code of its own.
package layout

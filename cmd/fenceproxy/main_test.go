package main

import (
	"testing"

	"go.uber.org/goleak"
)

// The program leaves no goroutine behind once serve returns: listeners,
// the store's workers, the master watch and idle upstream connections are
// all stopped.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

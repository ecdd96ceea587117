package check

import (
	"testing"

	"go.uber.org/goleak"
)

// porcupine's partition checkers stop when the check returns.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

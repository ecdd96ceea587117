//go:build !faultsbreak

package redisstore

import "testing"

// Constants, or this does not compile: nothing at run time (an
// environment variable, a test) can turn the controls on in this build.
const shippedBreaks = breakBroadcast || breakNoRetry

// Every build but the fault suite's has the controls of break.go off.
func TestNoBreaksOutsideFaultsBuild(t *testing.T) {
	if shippedBreaks {
		t.Fatal("a control of break.go is on in a build without the faultsbreak tag")
	}
}

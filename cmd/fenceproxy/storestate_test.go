package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// storeVerdict is the store's state as /status.json reports it (ok, down,
// unsafe, lost), and its reasons when not ok: the ping's error, then each
// failing check's, joined with "; ". /readyz answers the same reasons with
// FENCE_READY_REQUIRES_STORE=true; by default it stays 200 whatever they are.
func storeVerdict(t *testing.T, p *program) (state, reasons string) {
	t.Helper()
	var s struct {
		Store struct {
			State  string
			Error  string
			Checks []struct {
				OK    bool
				Error string
			}
		}
	}
	if err := json.Unmarshal([]byte(body(t, p.admin+"/status.json")), &s); err != nil {
		t.Fatalf("/status.json: %v", err)
	}
	var rs []string
	if s.Store.Error != "" {
		rs = append(rs, s.Store.Error)
	}
	for _, c := range s.Store.Checks {
		if !c.OK {
			rs = append(rs, c.Error)
		}
	}
	return s.Store.State, strings.Join(rs, "; ")
}

// waitStoreOK waits until the store's state is ok (fenced requests are
// admitted) and fails with its last reasons otherwise.
func waitStoreOK(t *testing.T, p *program) {
	t.Helper()
	var last string
	deadline := time.Now().Add(15 * time.Second)
	for {
		state, reasons := storeVerdict(t, p)
		if state == "ok" {
			return
		}
		last = fmt.Sprintf("%s: %s", state, reasons)
		if time.Now().After(deadline) {
			t.Fatalf("the store not ok within 15s: %s", last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wantStoreRefused expects the store's state not to be ok, with reasons
// containing each of want, and returns the reasons.
func wantStoreRefused(t *testing.T, p *program, want ...string) string {
	t.Helper()
	state, reasons := storeVerdict(t, p)
	if state == "ok" {
		t.Fatalf("the store is ok, want it refused")
	}
	for _, w := range want {
		if !strings.Contains(reasons, w) {
			t.Fatalf("store %s: reasons %q do not contain %q", state, reasons, w)
		}
	}
	return reasons
}

// waitStoreRefused waits until the store's state is not ok, with reasons
// containing want.
func waitStoreRefused(t *testing.T, p *program, want string) {
	t.Helper()
	waitFor(t, "the store refused naming "+want, func() bool {
		state, reasons := storeVerdict(t, p)
		return state != "ok" && strings.Contains(reasons, want)
	})
}

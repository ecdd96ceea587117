package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// The operator's commands on the embedded store: raise moves forward only,
// reset needs --force, list pages, -o json prints decimal strings, every
// change is one audit line, and store init refuses to replace a record
// without --force.
func TestMarksCommandsBolt(t *testing.T) {
	env := map[string]string{"FENCE_BOLT_PATH": filepath.Join(t.TempDir(), "marks.db")}
	cmd := func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		err := run(context.Background(), args, env, &out, &errOut)
		return out.String(), errOut.String(), err
	}
	want := func(out string, err error, substr string) {
		t.Helper()
		if err != nil || !strings.Contains(out, substr) {
			t.Fatalf("output %q, err %v; want %q", out, err, substr)
		}
	}
	out, audit, err := cmd("marks", "raise", "orders/7", "41")
	want(out, err, "orders/7 (none) -> 41")
	if !strings.Contains(audit, `"msg":"audit"`) || !strings.Contains(audit, `"new":"41"`) {
		t.Fatalf("no audit line: %s", audit)
	}
	out, audit, err = cmd("marks", "raise", "orders/7", "40")
	want(out, err, "unchanged")
	if strings.Contains(audit, `"msg":"audit"`) {
		t.Fatalf("an unchanged raise was audited: %s", audit)
	}
	_, _, err = cmd("marks", "reset", "orders/7", "5")
	if exitCode(err) != 2 || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("reset without --force: %v", err)
	}
	out, _, err = cmd("marks", "reset", "--force", "orders/7", "5")
	want(out, err, "orders/7 41 -> 5")
	out, _, err = cmd("marks", "raise", "-o", "json", "orders/8", "9:2")
	want(out, err, `"sequence":"2"`)
	out, _, err = cmd("marks", "list", "-o", "json", "orders/")
	if err != nil {
		t.Fatal(err)
	}
	var marks []map[string]string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]string
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("list -o json line %q: %v", line, err)
		}
		marks = append(marks, m)
	}
	if len(marks) != 2 || marks[0]["mark"] != "5" || marks[1]["mark"] != "9" {
		t.Fatalf("list: %v", marks)
	}
	out, _, err = cmd("marks", "get", "orders/8")
	want(out, err, "orders/8 9:2")
	out, _, err = cmd("marks", "reset", "--force", "orders/8")
	want(out, err, "orders/8 9:2 -> (none)")

	out, _, err = cmd("store", "init")
	want(out, err, "identity ")
	if _, _, err = cmd("store", "init"); err == nil || !strings.Contains(err.Error(), "intact") {
		t.Fatalf("second store init: %v", err)
	}
	// A store that is not lost: --force is refused, and says why.
	if _, _, err = cmd("store", "init", "--force"); err == nil || !strings.Contains(err.Error(), "refused: the store is not lost") {
		t.Fatalf("store init --force on an intact store: %v", err)
	}
	if _, _, err = cmd("marks", "get", ""); exitCode(err) != 2 || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("marks get of an empty name: %v", err)
	}
	if _, _, err = cmd("marks", "frobnicate"); exitCode(err) != 2 {
		t.Fatalf("unknown marks command: %v", err)
	}
}

package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// Sequences through the real program, with FENCE_SEQUENCE_HEADER renamed, on
// the embedded store and on Redis: the pair orders one lease's writes, and
// the mark survives a restart of the program.
func TestSequencesEndToEnd(t *testing.T) {
	routes := writeRoutes(t, `routes:
  - name: jobs
    path: /jobs/{id:uint}
    resource: jobs/{id}
    sequence: required
`)
	stores := map[string]func(t *testing.T) map[string]string{
		"bolt": func(t *testing.T) map[string]string {
			return map[string]string{"FENCE_BOLT_PATH": filepath.Join(t.TempDir(), "marks.db")}
		},
		"redis": func(t *testing.T) map[string]string {
			rs := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
			return map[string]string{"FENCE_REDIS_URL": rs.URL()}
		},
	}
	for name, storeEnv := range stores {
		t.Run(name, func(t *testing.T) {
			up := newCountingUpstream(t)
			env := storeEnv(t)
			env["FENCE_UPSTREAM_URL"] = up.URL
			env["FENCE_ROUTES_FILE"] = routes
			env["FENCE_SEQUENCE_HEADER"] = "X-Write-Seq"
			p := start(t, env)
			waitFor(t, "ready", func() bool { return status(t, p.admin+"/readyz") == 200 })
			send := func(p *program, token, seq string) (int, map[string]any) {
				t.Helper()
				req, _ := http.NewRequest("PUT", p.data+"/jobs/7", strings.NewReader("x"))
				req.Header.Set("Fencing-Token", token)
				if seq != "" {
					req.Header.Set("X-Write-Seq", seq)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var pr map[string]any
				_ = json.NewDecoder(resp.Body).Decode(&pr)
				return resp.StatusCode, pr
			}
			if code, pr := send(p, "5", "1"); code != 200 {
				t.Fatalf("(5,1): %d %v", code, pr)
			}
			if code, pr := send(p, "5", "2"); code != 200 {
				t.Fatalf("(5,2): %d %v", code, pr)
			}
			if code, pr := send(p, "5", "2"); code != 409 || pr["type"] != "urn:fenceproxy:stale-sequence" || pr["highWaterSequence"] != "2" {
				t.Fatalf("(5,2) again: %d %v", code, pr)
			}
			if code, pr := send(p, "5", ""); code != 428 || pr["type"] != "urn:fenceproxy:sequence-required" {
				t.Fatalf("(5) without the renamed header: %d %v", code, pr)
			}
			if err := p.stop(); err != nil {
				t.Fatal(err)
			}
			p2 := start(t, env)
			waitFor(t, "ready", func() bool { return status(t, p2.admin+"/readyz") == 200 })
			if code, pr := send(p2, "5", "1"); code != 409 || pr["type"] != "urn:fenceproxy:stale-sequence" {
				t.Fatalf("(5,1) after a restart: %d %v", code, pr)
			}
			if code, pr := send(p2, "6", "0"); code != 200 {
				t.Fatalf("(6,0): %d %v", code, pr)
			}
			if n := up.n.Load(); n != 3 {
				t.Fatalf("the upstream received %d writes, want 3", n)
			}
		})
	}
}

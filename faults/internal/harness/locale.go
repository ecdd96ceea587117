package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/fenceproxy/fenceproxy/faults/check"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// locale: redis-server runs under en_US.UTF-8, whose collation (which Lua's
// string < follows in Redis) orders "42:--..." (no sequence) after
// "42:00...01" (sequence 1), where bytes order it before. Per trial, on a
// resource of its own on the route with optional sequences, an unsequenced
// write of token 5 is held at the upstream; once it began, (5, 1) goes
// through the other replica and must wait at the barrier until the
// unsequenced one has ended. The load runs on the usual resources
// meanwhile, under the same locale.

// seqResourcePrefix names the resources of the route with sequences
// (POST /sq/{id}, routesYAML).
const seqResourcePrefix = "sq-"

// localeName is the locale redis-server runs under.
const localeName = "en_US.UTF-8"

// localeEnv returns the environment that makes redis-server run under
// localeName: the system's, when it has it, else one generated with
// localedef (the locales package) into the user's cache directory, once.
func localeEnv(_ *env) ([]string, error) {
	if out, err := exec.Command("locale", "-a").Output(); err == nil {
		for l := range strings.Lines(string(out)) {
			if n := strings.ToLower(strings.TrimSpace(l)); n == "en_us.utf8" || n == "en_us.utf-8" {
				return []string{"LC_ALL=" + localeName}, nil
			}
		}
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "fenceproxy-faults", "locale")
	if _, err := os.Stat(filepath.Join(dir, localeName, "LC_COLLATE")); err != nil {
		if err := generateLocale(dir); err != nil {
			return nil, err
		}
	}
	return []string{"LOCPATH=" + dir, "LC_ALL=" + localeName}, nil
}

// generateLocale compiles en_US.UTF-8 into dir (a temporary directory
// renamed into place, so that a run interrupted halfway leaves nothing).
func generateLocale(dir string) error {
	if _, err := exec.LookPath("localedef"); err != nil {
		return errors.New("localedef not found: apt-get install -y locales")
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "locale-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// localedef exits 1 on warnings while still writing the locale.
	out, err := exec.Command("localedef", "-i", "en_US", "-f", "UTF-8", filepath.Join(tmp, localeName)).CombinedOutput()
	if _, serr := os.Stat(filepath.Join(tmp, localeName, "LC_COLLATE")); serr != nil {
		return fmt.Errorf("localedef -i en_US -f UTF-8: %v: %s", err, out)
	}
	_ = os.RemoveAll(dir)
	return os.Rename(tmp, dir)
}

// collationProbe is the comparison the barrier's entries need: an entry of
// token 42 without a sequence against the order of (42, 1). Bytes put the
// first before the second; en_US.UTF-8's collation does not.
const collationProbe = `if '00000000000000000042:--------------------:000000000000001:x' < '00000000000000000042:00000000000000000001' then return 1 else return 0 end`

// localeTrials checks that Redis collates as en_US.UTF-8 does, then runs
// the trials.
func localeTrials(ctx context.Context, e *env) error {
	if err := e.sleep(ctx, e.p.warmup/2); err != nil {
		return err
	}
	v, err := redistest.Do(e.master.Addr(), nil, "EVAL", collationProbe, "0")
	if err != nil {
		return fmt.Errorf("collation probe: %w", err)
	}
	e.collates = fmt.Sprint(v) == "0"
	hc := newClient()
	defer hc.CloseIdleConnections()
	start := e.now()
	for i := range e.p.orderTrials {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		res := fmt.Sprintf("%sloc%d", seqResourcePrefix, i)
		id := func(what string) string { return fmt.Sprintf("%s-%s-%s", e.sc.name, res, what) }
		t := e.heldTrial(hc, i, wakeTrial{
			old: check.Op{ID: id("unsequenced"), Client: -6, Replica: i % 2, Resource: res, Token: slowOldToken},
			nw: check.Op{ID: id("seq1"), Client: -6, Replica: 1 - i%2, Resource: res, Token: slowOldToken,
				Seq: 1, HasSeq: true},
		})
		e.mu.Lock()
		e.trials = append(e.trials, t)
		e.mu.Unlock()
		e.addOps(t.old, t.nw)
	}
	e.fault(start, -1)
	return e.sleep(ctx, e.p.cooldown)
}

// judgeTrials: every trial ran; a newer request that reached the upstream
// while the older one was held is a violation.
func judgeTrials(e *env, _ []check.Op, res *Result) {
	if len(e.trials) == 0 {
		res.Problems = append(res.Problems, "no trial ran")
	}
	heldViolations(e.trials, res)
}

// expectCollation: Redis did collate as en_US.UTF-8 does, or the scenario
// tested nothing.
func expectCollation(e *env, _ []check.Op) []string {
	if !e.collates {
		return []string{"redis-server did not collate as " + localeName + " (the probe compared as bytes): the scenario tested nothing"}
	}
	return nil
}

func trialFields(e *env, _ []check.Op, _ *check.Report) []string {
	early := 0
	for _, t := range e.trials {
		if t.early {
			early++
		}
	}
	return []string{fmt.Sprintf("locale=%s collates_unlike_bytes=%t trials=%d newer_early=%d",
		localeName, e.collates, len(e.trials), early)}
}

package harness

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/faults/check"
)

func TestParseRedisMark(t *testing.T) {
	for _, c := range []struct {
		in   string
		want check.Pair
	}{
		{"42", check.Pair{Token: 42}},
		{"0", check.Pair{}},
		{"42:7", check.Pair{Token: 42, Seq: 7, HasSeq: true}},
		{"42:0", check.Pair{Token: 42, HasSeq: true}},
		{"18446744073709551615:18446744073709551615", check.Pair{Token: 1<<64 - 1, Seq: 1<<64 - 1, HasSeq: true}},
	} {
		if got, err := parseRedisMark(c.in); err != nil || got != c.want {
			t.Errorf("parseRedisMark(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "42:", ":7", "042", "42:07", "1:2:3", "4x", " 42", "18446744073709551616"} {
		if got, err := parseRedisMark(in); err == nil {
			t.Errorf("parseRedisMark(%q) = %v, want an error", in, got)
		}
	}
}

// The upstream works on a request for as long as X-Faults-Work says,
// whether or not the client is still there, and records that the client
// left first.
func TestUpstreamWorkOutlivesTheClient(t *testing.T) {
	up, err := startUpstream(clock{start: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	defer up.close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, up.URL()+"/sq/sq-x", strings.NewReader("w"))
	req.Header.Set(RequestIDHeader, "gone")
	req.Header.Set("Fencing-Token", "5")
	req.Header.Set(sequenceHeader, "3")
	req.Header.Set(workHeader, "300ms")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("answered before the work was done")
	}
	for t0 := time.Now(); time.Since(t0) < 2*time.Second; time.Sleep(10 * time.Millisecond) {
		f, _ := up.Forward("gone")
		if f.End == 0 {
			continue
		}
		if time.Duration(f.End-f.At) < 300*time.Millisecond || !f.Abandoned || f.Pair() != (check.Pair{Token: 5, Seq: 3, HasSeq: true}) || f.Resource != "sq-x" {
			t.Fatalf("%+v", f)
		}
		return
	}
	t.Fatal("the work never ended")
}

// The clock shim moves a process's wall clock by the offset in its file,
// read on every call, and leaves the monotonic clock alone.
func TestClockShim(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found")
	}
	e := &env{h: &Harness{dir: t.TempDir()}, sc: &scenario{name: "clock-step"}, opts: Options{Log: io.Discard}}
	environ, err := clockEnv(e)
	if err != nil {
		t.Fatal(err)
	}
	now := func() int64 {
		cmd := exec.Command("date", "+%s")
		cmd.Env = append(os.Environ(), environ...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, step := range []time.Duration{clockStep, -clockStep, 0} {
		if err := e.stepClock(step); err != nil {
			t.Fatal(err)
		}
		got := time.Duration(now()-time.Now().Unix()) * time.Second
		if (got - step).Abs() > 5*time.Second {
			t.Fatalf("offset %v: date is %v off", step, got)
		}
	}
}

func TestJudgeHerd(t *testing.T) {
	phases := func(one, most float64) []herdPhase {
		return []herdPhase{{writers: 1, admitted: 100, perDecided: one}, {writers: 10, admitted: 50, perDecided: one},
			{writers: 100, admitted: 90, refused: 10, perDecided: most}}
	}
	for _, c := range []struct {
		name                 string
		herd                 []herdPhase
		violations, problems int
	}{
		{"flat", phases(10, 19.9), 0, 0},
		{"a wake for every waiter", phases(10, 147), 1, 0},
		{"a phase missing", phases(10, 10)[:2], 0, 1},
		{"nothing admitted", []herdPhase{{writers: 1, problem: "x"}, {writers: 10}, {writers: 100}}, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := &env{herd: c.herd}
			var res Result
			judgeHerd(e, nil, &res)
			if len(res.Violations) != c.violations || len(res.Problems) != c.problems {
				t.Fatalf("violations %q problems %q", res.Violations, res.Problems)
			}
		})
	}
	e := &env{herd: phases(10, 30)}
	if f := strings.Join(herdFields(e, nil, nil), " "); !strings.Contains(f, "herd_ratio=3.00") || !strings.Contains(f, "writers=1,10,100") {
		t.Fatalf("fields %q", f)
	}
}

func TestResume(t *testing.T) {
	s := int64(time.Second)
	ok := func(res string, call, ret int64) check.Op {
		return check.Op{Resource: res, Status: 200, Outcome: check.Admitted, Call: call, Return: ret}
	}
	e := &env{p: params{resources: 2}, promoted: 10 * s}
	ops := []check.Op{
		ok("r0", 9*s, 12*s), // sent before the promotion: does not count
		ok("r0", 11*s, 11*s+s/2),
		ok("r1", 10*s, 13*s),
		{Resource: "r1", Status: 503, Outcome: check.Unavailable, Call: 10 * s, Return: 10*s + 1},
	}
	if worst, missing := e.resume(ops); worst != 3*time.Second || missing != 0 {
		t.Fatalf("resume %v missing %d", worst, missing)
	}
	var res Result
	judgeResume(e, ops, &res)
	if len(res.Violations) != 0 {
		t.Fatalf("%q", res.Violations)
	}
	ops = append(ops[:2], ok("r1", 10*s, 16*s))
	res = Result{}
	judgeResume(e, ops, &res)
	if len(res.Violations) != 1 || !strings.Contains(res.Violations[0], "6.0 s") {
		t.Fatalf("%q", res.Violations)
	}
	res = Result{}
	judgeResume(e, ops[:2], &res)
	if len(res.Violations) != 1 || !strings.Contains(res.Violations[0], "1 of 2 resources") {
		t.Fatalf("%q", res.Violations)
	}
}

func TestJudgeClockStep(t *testing.T) {
	ms := int64(time.Millisecond)
	round := func(newBegin int64, offset time.Duration) (*env, Result) {
		r := clockRound{
			old:    check.Op{ID: "old", Resource: "clock-0", Token: 5, Status: 200},
			nw:     check.Op{ID: "newer", Resource: "clock-0", Token: 6, Status: 200},
			offset: offset,
		}
		e := &env{clockRounds: []clockRound{r}, up: &Upstream{recs: []check.Forward{
			{ID: "old", Resource: "clock-0", Token: 5, At: 100 * ms, End: 900 * ms},
			{ID: "newer", Resource: "clock-0", Token: 6, At: newBegin, End: newBegin + ms},
		}}}
		var res Result
		judgeClockStep(e, nil, &res)
		return e, res
	}
	if _, res := round(901*ms, clockStep); len(res.Violations)+len(res.Problems) != 0 {
		t.Fatalf("waited: %q %q", res.Violations, res.Problems)
	}
	if _, res := round(120*ms, clockStep); len(res.Violations) != 1 {
		t.Fatalf("overtook: %q", res.Violations)
	}
	if _, res := round(901*ms, 0); len(res.Problems) != 1 {
		t.Fatalf("clock not stepped: %q", res.Problems)
	}
}

func TestJudgeTrials(t *testing.T) {
	e := &env{trials: []wakeTrial{
		{old: check.Op{Resource: "sq-loc0", Token: 5}, nw: check.Op{Resource: "sq-loc0", Token: 5, Seq: 1, HasSeq: true}},
		{old: check.Op{Resource: "sq-loc1", Token: 5}, nw: check.Op{Resource: "sq-loc1", Token: 5, Seq: 1, HasSeq: true}, early: true},
	}}
	var res Result
	judgeTrials(e, nil, &res)
	if len(res.Violations) != 1 || !strings.Contains(res.Violations[0], "(5, 1)") {
		t.Fatalf("%q", res.Violations)
	}
	if p := expectCollation(e, nil); len(p) != 1 {
		t.Fatalf("collation not checked: %q", p)
	}
}

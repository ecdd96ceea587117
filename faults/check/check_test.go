package check

import (
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Synthetic histories: each violation the suite claims to catch is caught,
// and the indeterminate cases the proxy documents are not flagged.

func write(id, res string, tok uint64, gt bool, out Outcome, mark uint64, call, ret int64) Op {
	status := map[Outcome]int{Admitted: 200, Stale: 409, Unavailable: 503, Failed: 0}[out]
	if out == Admitted {
		mark = tok
	}
	return Op{ID: id, Client: int(call % 4), Replica: 0, Resource: res, Token: tok, Greater: gt,
		Outcome: out, Mark: mark, Status: status, Call: call, Return: ret}
}

func read(res string, mark uint64, call, ret int64) Op {
	return Op{Client: -1, Replica: -1, Resource: res, Outcome: Read, Mark: mark, Call: call, Return: ret}
}

// fwdFor returns the forward records of every 2xx write in ops, received
// just before it returned.
func fwdFor(ops []Op) []Forward {
	var f []Forward
	for _, op := range ops {
		if op.Outcome == Admitted {
			f = append(f, Forward{ID: op.ID, Resource: op.Resource, Token: op.Token, At: op.Return - 1})
		}
	}
	return f
}

const timeout = 10 * time.Second

func TestGoodHistoryPasses(t *testing.T) {
	ops := []Op{
		write("a", "r", 10, false, Admitted, 0, 0, 10),
		write("b", "r", 10, false, Admitted, 0, 5, 20), // equal under >=
		write("c", "r", 9, false, Stale, 10, 21, 30),
		write("d", "r", 10, true, Stale, 10, 31, 40), // equal under >
		write("e", "r", 11, true, Admitted, 0, 41, 50),
		read("r", 11, 51, 52),
		// concurrent: 13 and 12 overlap, 12 may linearize first
		write("f", "r", 13, false, Admitted, 0, 60, 80),
		write("g", "r", 12, false, Admitted, 0, 61, 81),
		write("h", "s", 5, false, Admitted, 0, 0, 1),
	}
	r := Check(ops, fwdFor(ops), timeout)
	if !r.Safe() || r.Linearizable != porcupine.Ok || r.MissingForwards != 0 {
		t.Fatalf("good history flagged: %+v", r)
	}
	if r.Ops != 8 || r.Reads != 1 || r.Admitted != 6 || r.Stale != 2 {
		t.Fatalf("counts: %+v", r)
	}
}

// A 503 whose admission the store applies after the client gave up (Redis
// resumed from SIGSTOP): a later 409 reports the 503's token as the mark.
// Legal, and the mark it reports counts from then on.
func TestLateAppliedUnavailableIsLegal(t *testing.T) {
	ops := []Op{
		write("a", "r", 5, false, Admitted, 0, 0, 1),
		write("u", "r", 10, false, Unavailable, 0, 2, 3),
		write("b", "r", 4, false, Stale, 5, 4, 5),  // not applied yet
		write("c", "r", 9, false, Stale, 10, 6, 7), // applied now
		write("d", "r", 10, true, Stale, 10, 8, 9), // and stays
		write("e", "r", 10, false, Admitted, 0, 10, 11),
	}
	r := Check(ops, fwdFor(ops), timeout)
	if !r.Safe() || r.Linearizable != porcupine.Ok {
		t.Fatalf("late-applied 503 flagged: %+v", r)
	}
	if r.Unavailable != 1 {
		t.Fatalf("unavailable = %d, want 1", r.Unavailable)
	}
}

func TestStaleAdmissionIsCaught(t *testing.T) {
	ops := []Op{
		write("a", "r", 10, false, Admitted, 0, 0, 10),
		write("b", "r", 7, false, Admitted, 0, 11, 20), // 7 < 10, after 10 completed
	}
	r := Check(ops, fwdFor(ops), timeout)
	if r.StaleAdmissions != 1 {
		t.Fatalf("stale_admissions = %d, want 1: %+v", r.StaleAdmissions, r)
	}
	if r.Linearizable != porcupine.Illegal {
		t.Fatalf("linearizable = %s, want Illegal", r.Linearizable)
	}
	// The stale request reached the upstream as well.
	if r.UnfencedForwards != 1 {
		t.Fatalf("unfenced_forwards = %d, want 1", r.UnfencedForwards)
	}
	wantExample(t, r, "stale_admission: r token 7")

	// Equal token under ">" after it was admitted is stale too.
	ops = []Op{
		write("a", "r", 10, true, Admitted, 0, 0, 10),
		write("b", "r", 10, true, Admitted, 0, 11, 20),
	}
	if r := Check(ops, fwdFor(ops), timeout); r.StaleAdmissions != 1 || r.Linearizable != porcupine.Illegal {
		t.Fatalf("equal token under > admitted twice: %+v", r)
	}
	// Concurrent: not stale (either order is a linearization).
	ops = []Op{
		write("a", "r", 10, false, Admitted, 0, 0, 10),
		write("b", "r", 7, false, Admitted, 0, 5, 20),
	}
	if r := Check(ops, fwdFor(ops), timeout); !r.Safe() || r.Linearizable != porcupine.Ok {
		t.Fatalf("concurrent admissions flagged: %+v", r)
	}
}

func TestRegressionIsCaught(t *testing.T) {
	// A 409 reporting a mark below one admitted before.
	ops := []Op{
		write("a", "r", 10, false, Admitted, 0, 0, 10),
		write("b", "r", 5, false, Stale, 8, 11, 20),
	}
	r := Check(ops, fwdFor(ops), timeout)
	if r.Regressions != 1 || r.StaleAdmissions != 0 || r.UnfencedForwards != 0 {
		t.Fatalf("409 below the mark: %+v", r)
	}
	if r.Linearizable != porcupine.Illegal {
		t.Fatalf("linearizable = %s, want Illegal", r.Linearizable)
	}
	wantExample(t, r, "regression: r stale reported mark 8")

	// A direct read (the final read of a run) finding the mark gone.
	ops = []Op{
		write("a", "r", 10, false, Admitted, 0, 0, 10),
		read("r", 0, 11, 12),
	}
	if r := Check(ops, fwdFor(ops), timeout); r.Regressions != 1 || r.Linearizable != porcupine.Illegal {
		t.Fatalf("mark vanished: %+v", r)
	}
}

func TestUnfencedForwardIsCaught(t *testing.T) {
	ops := []Op{
		write("a", "r", 10, false, Admitted, 0, 0, 10),
		write("b", "r", 7, false, Stale, 10, 11, 20),
		write("c", "r", 11, false, Unavailable, 0, 21, 30),
	}
	cases := map[string][]Forward{
		"a refused request":        {{ID: "b", Resource: "r", Token: 7, At: 15}},
		"a 503'd request":          {{ID: "c", Resource: "r", Token: 11, At: 25}},
		"a request no client sent": {{ID: "zz", Resource: "r", Token: 3, At: 25}},
		"another token than sent":  {{ID: "a", Resource: "r", Token: 9, At: 5}},
	}
	for name, extra := range cases {
		t.Run(name, func(t *testing.T) {
			r := Check(ops, append(fwdFor(ops), extra...), timeout)
			if r.UnfencedForwards != 1 || r.StaleAdmissions != 0 || r.Regressions != 0 {
				t.Fatalf("%+v", r)
			}
		})
	}

	// A request whose client saw a connection error may arrive, if it was
	// not stale at its call...
	ops = []Op{
		write("a", "r", 10, false, Admitted, 0, 0, 10),
		write("b", "r", 12, false, Failed, 0, 11, 20),
		write("c", "r", 9, false, Failed, 0, 21, 30),
	}
	fwd := append(fwdFor(ops), Forward{ID: "b", Resource: "r", Token: 12, At: 15})
	if r := Check(ops, fwd, timeout); !r.Safe() {
		t.Fatalf("forwarded connection-error request flagged: %+v", r)
	}
	// ... but not if it was.
	fwd = append(fwd, Forward{ID: "c", Resource: "r", Token: 9, At: 25})
	if r := Check(ops, fwd, timeout); r.UnfencedForwards != 1 {
		t.Fatalf("stale forward of a connection-error request: %+v", r)
	}
}

func TestLateForwardIsReportedNotFailed(t *testing.T) {
	// 7 admitted before 10 (concurrent), but it reaches the upstream after
	// 10's admission completed: the documented "requests already past it".
	ops := []Op{
		write("a", "r", 7, false, Admitted, 0, 0, 100),
		write("b", "r", 10, false, Admitted, 0, 1, 10),
	}
	fwd := []Forward{{ID: "b", Resource: "r", Token: 10, At: 9}, {ID: "a", Resource: "r", Token: 7, At: 50}}
	r := Check(ops, fwd, timeout)
	if !r.Safe() || r.LateForwards != 1 || r.Linearizable != porcupine.Ok {
		t.Fatalf("%+v", r)
	}
}

func TestMissingForwardIsCounted(t *testing.T) {
	ops := []Op{write("a", "r", 10, false, Admitted, 0, 0, 10)}
	if r := Check(ops, nil, timeout); r.MissingForwards != 1 {
		t.Fatalf("%+v", r)
	}
}

// A history that none of the three figures flags but that no sequential
// max-register can produce: a 409 reporting a mark no write ever carried.
func TestLinearizabilityViolationIsCaught(t *testing.T) {
	ops := []Op{
		write("a", "r", 5, false, Admitted, 0, 0, 10),
		write("b", "r", 6, false, Stale, 8, 11, 20), // 8: nobody sent it
	}
	r := Check(ops, fwdFor(ops), timeout)
	if !r.Safe() {
		t.Fatalf("expected the figures to miss this one: %+v", r)
	}
	if r.Linearizable != porcupine.Illegal {
		t.Fatalf("linearizable = %s, want Illegal", r.Linearizable)
	}

	// Two concurrent reads that disagree in an order no register allows:
	// the mark seen as 10, then as 5, while 5 was admitted before 10.
	ops = []Op{
		write("a", "r", 5, false, Admitted, 0, 0, 10),
		write("b", "r", 10, false, Admitted, 0, 11, 100),
		read("r", 10, 20, 30),
		read("r", 5, 40, 50),
	}
	r = Check(ops, fwdFor(ops), timeout)
	if r.Linearizable != porcupine.Illegal || r.Regressions != 1 {
		t.Fatalf("%+v", r)
	}
}

func wantExample(t *testing.T, r Report, prefix string) {
	t.Helper()
	for _, e := range r.Examples {
		if strings.HasPrefix(e, prefix) {
			return
		}
	}
	t.Fatalf("no example starting %q in %q", prefix, r.Examples)
}

// seqw is a write with a sequence; a stale one reports the mark's pair.
func seqw(id, res string, tok, seq uint64, out Outcome, mark, markSeq uint64, call, ret int64) Op {
	op := write(id, res, tok, false, out, mark, call, ret)
	op.Seq, op.HasSeq = seq, true
	if out == Stale {
		op.MarkSeq, op.MarkHasSeq = markSeq, true
	}
	return op
}

func fwdPairs(ops []Op) []Forward {
	f := fwdFor(ops)
	for i := range f {
		for _, op := range ops {
			if op.ID == f[i].ID {
				f[i].Seq, f[i].HasSeq = op.Seq, op.HasSeq
			}
		}
	}
	return f
}

// On a route with sequences the store orders (token, sequence): a history
// that is legal by tokens alone but admits a sequence not above the mark's,
// or reports a mark's sequence going back, is caught.
func TestSequenceHistories(t *testing.T) {
	good := []Op{
		write("u", "r", 42, false, Admitted, 0, 0, 5),   // unsequenced 42: mark 42
		seqw("a", "r", 42, 1, Admitted, 0, 0, 10, 20),   // (42, 1) above 42
		seqw("b", "r", 42, 1, Stale, 42, 1, 21, 30),     // equal pair: stale-sequence
		write("v", "r", 42, false, Admitted, 0, 31, 40), // unsequenced 42 under >=: the mark stays (42, 1)
		seqw("c", "r", 42, 2, Admitted, 0, 0, 41, 50),   // (42, 2)
		seqw("d", "r", 41, 9, Stale, 42, 2, 51, 60),     // a lower token: stale-token with the pair
		{Client: -1, Replica: -1, Resource: "r", Outcome: Read, Mark: 42, MarkSeq: 2, MarkHasSeq: true, Call: 61, Return: 62},
	}
	r := Check(good, fwdPairs(good), timeout)
	if !r.Safe() || r.Linearizable != porcupine.Ok {
		t.Fatalf("good sequence history flagged: %+v", r)
	}

	cases := []struct {
		name string
		ops  []Op
		want func(r Report) bool
	}{
		{"an equal pair admitted twice", []Op{
			seqw("a", "r", 42, 7, Admitted, 0, 0, 0, 10),
			seqw("b", "r", 42, 7, Admitted, 0, 0, 11, 20),
		}, func(r Report) bool { return r.StaleAdmissions == 1 && r.Linearizable == porcupine.Illegal }},
		{"a lower sequence admitted after a higher one", []Op{
			seqw("a", "r", 42, 8, Admitted, 0, 0, 0, 10),
			seqw("b", "r", 42, 7, Admitted, 0, 0, 11, 20),
		}, func(r Report) bool { return r.StaleAdmissions == 1 && r.Linearizable == porcupine.Illegal }},
		{"a 409 reporting a sequence below one admitted before", []Op{
			seqw("a", "r", 42, 8, Admitted, 0, 0, 0, 10),
			seqw("b", "r", 42, 3, Stale, 42, 5, 11, 20),
		}, func(r Report) bool { return r.Regressions == 1 && r.Linearizable == porcupine.Illegal }},
		{"a refusal the store could not give: sequence above the mark", []Op{
			seqw("a", "r", 42, 1, Admitted, 0, 0, 0, 10),
			seqw("b", "r", 42, 5, Stale, 42, 1, 11, 20),
		}, func(r Report) bool { return r.Safe() && r.Linearizable == porcupine.Illegal }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if r := Check(c.ops, fwdPairs(c.ops), timeout); !c.want(r) {
				t.Fatalf("%+v", r)
			}
		})
	}
	// The upstream received another sequence than the client sent.
	ops := []Op{seqw("a", "r", 42, 1, Admitted, 0, 0, 0, 10)}
	fwd := fwdPairs(ops)
	fwd[0].Seq = 2
	if r := Check(ops, fwd, timeout); r.UnfencedForwards != 1 {
		t.Fatalf("another sequence than sent: %+v", r)
	}
}

package harness

import (
	"testing"

	"github.com/fenceproxy/fenceproxy/faults/check"
)

func TestMetricSum(t *testing.T) {
	text := `# HELP fenceproxy_mark_regressions_total x
# TYPE fenceproxy_mark_regressions_total counter
fenceproxy_mark_regressions_total{route="ge"} 3
fenceproxy_mark_regressions_total{route="gt"} 2
fenceproxy_mark_regressions_totalx 100
fenceproxy_store_lost 1
`
	if v, err := metricSum(text, "fenceproxy_mark_regressions_total"); err != nil || v != 5 {
		t.Fatalf("regressions = %v, %v; want 5", v, err)
	}
	if v, err := metricSum(text, "fenceproxy_store_lost"); err != nil || v != 1 {
		t.Fatalf("store_lost = %v, %v; want 1", v, err)
	}
	if v, err := metricSum(text, "fenceproxy_absent"); err != nil || v != 0 {
		t.Fatalf("absent = %v, %v; want 0", v, err)
	}
}

// A restore takes back the marks admitted between its backup and the
// moment the store went back: lost_marks and erased_marks count against
// that moment (lossAt), not against the start of the fault, which comes
// before the backup and so finds nothing the backup lacks.
func TestLossAtCountsWhatTheRestoreTookBack(t *testing.T) {
	const backup, wentBack = 100, 200
	admitted := func(res string, tok uint64, ret int64) check.Op {
		return check.Op{Resource: res, Token: tok, Outcome: check.Admitted, Call: ret - 5, Return: ret}
	}
	ops := []check.Op{
		admitted("r0", 5, 50),        // in the backup
		admitted("r0", 7, 150),       // between the backup and the restore: taken back
		admitted("r1", 3, 60),        // in the backup
		admitted("r1", 9, 250),       // on the restored store
		admitted("r2", 4, backup+10), // taken back, and raised again by the recovery (read 4)
	}
	// What the store holds after the restore (or after the recovery).
	reads := []check.Op{{Resource: "r0", Mark: 5, Outcome: check.Read}, {Resource: "r1", Mark: 3, Outcome: check.Read},
		{Resource: "r2", Mark: 4, Outcome: check.Read}}
	for _, c := range []struct {
		name      string
		e         *env
		resources int
		tokens    uint64
	}{
		{"a restore: against the kill that sent the store back", &env{loss: &storeLoss{start: backup - 10}, wentBack: wentBack}, 1, 2},
		{"a flush: against its start", &env{loss: &storeLoss{start: 160}}, 1, 2},
		{"a flush before anything was taken back", &env{loss: &storeLoss{start: backup - 10}}, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.e.checkpointLoss(reads)
			if n, tok := c.e.lostMarks(ops); n != c.resources || tok != c.tokens {
				t.Errorf("lostMarks = %d resources, %d tokens; want %d, %d", n, tok, c.resources, c.tokens)
			}
		})
	}
}

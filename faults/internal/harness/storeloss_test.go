package harness

import "testing"

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

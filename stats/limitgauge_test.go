package stats

import (
	"strings"
	"testing"
)

// TestLimitGauge: queue_concurrency_limit is written, with its header and
// the labels, only when Gauges.Limit is set (an adaptive limit).
func TestLimitGauge(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		g     Gauges
		want  []string
		wantN int // occurrences of the metric's name
	}{
		{"adaptive", Gauges{Depth: func() int { return 2 }, Limit: func() int { return 7 }},
			[]string{"# TYPE queue_concurrency_limit gauge\n", `queue_concurrency_limit{revision="r1"} 7` + "\n"}, 3},
		{"fixed", Gauges{Depth: func() int { return 2 }}, nil, 0},
		{"none", Gauges{}, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var b strings.Builder
			if err := New(Config{}).WritePrometheus(&b, `revision="r1"`, tt.g); err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("metrics lack %q:\n%s", w, b.String())
				}
			}
			if got := strings.Count(b.String(), "queue_concurrency_limit"); got != tt.wantN {
				t.Errorf("queue_concurrency_limit appears %d times, want %d:\n%s", got, tt.wantN, b.String())
			}
		})
	}
}

package worker

import (
	"strings"
	"testing"
)

func testLanes(weights ...int) []*lane {
	lanes := make([]*lane, len(weights))
	for i, w := range weights {
		lanes[i] = &lane{Lane: Lane{Queue: string(rune('a' + i)), Weight: w}, stride: scale / int64(w), empty: true}
	}
	return lanes
}

// grants gives n slots one at a time to the lanes for which hasWork says
// so, as a fetcher would, and returns the lanes' names in grant order.
func grants(s *sched, lanes []*lane, n int, hasWork func(l *lane) bool) string {
	var b strings.Builder
	for range n {
		var cands []*lane
		for _, l := range lanes {
			if hasWork(l) {
				cands = append(cands, l)
			} else {
				l.empty = true
			}
		}
		s.rejoin(cands)
		plan := s.plan(cands, 1)
		for i, l := range cands {
			if plan[i] == 1 {
				s.grant(l, 1)
				b.WriteString(l.Queue)
			}
		}
	}
	return b.String()
}

// The rule of lanes.go as a table: weights share the slots among the
// lanes with work, the heavier lane first; an idle lane earns no credit.
func TestSchedShares(t *testing.T) {
	t.Parallel()
	always := func(*lane) bool { return true }
	for _, tc := range []struct {
		name    string
		weights []int
		warm    func(s *sched, lanes []*lane) // history before the grants
		n       int
		hasWork func(l *lane) bool
		want    string
	}{
		{name: "10:1, both full", weights: []int{10, 1}, n: 22, hasWork: always,
			want: "aaaaaaaaaabaaaaaaaaaab"},
		{name: "equal weights alternate, first lane first", weights: []int{1, 1}, n: 6, hasWork: always,
			want: "ababab"},
		{name: "3:2:1", weights: []int{3, 2, 1}, n: 12, hasWork: always,
			want: "abaabcabaabc"},
		{name: "only the light lane has work: it gets every slot", weights: []int{10, 1}, n: 5,
			hasWork: func(l *lane) bool { return l.Queue == "b" }, want: "bbbbb"},
		{name: "the heavy lane back from idle earns no credit, and goes first", weights: []int{10, 1},
			warm: func(s *sched, lanes []*lane) {
				for range 50 {
					s.grant(lanes[1], 1) // b alone for a while
				}
			},
			n: 12, hasWork: always, want: "aaaaaaaaaaba"},
		{name: "the light lane back from idle does not take a run of slots", weights: []int{10, 1},
			warm: func(s *sched, lanes []*lane) {
				for range 500 {
					s.grant(lanes[0], 1) // a alone for a while
				}
				lanes[1].empty = true
			},
			n: 12, hasWork: always, want: "aaaaaaaaaaba"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var s sched
			lanes := testLanes(tc.weights...)
			if tc.warm != nil {
				tc.warm(&s, lanes)
			}
			if got := grants(&s, lanes, tc.n, tc.hasWork); got != tc.want {
				t.Errorf("grants %s, want %s", got, tc.want)
			}
		})
	}
}

// plan splits several slots at once as one-at-a-time grants would, and
// changes nothing.
func TestSchedPlan(t *testing.T) {
	t.Parallel()
	var s sched
	lanes := testLanes(10, 1)
	s.rejoin(lanes)
	if got := s.plan(lanes, 11); got[0] != 10 || got[1] != 1 {
		t.Errorf("plan of 11 slots at 10:1: %v", got)
	}
	if got := s.plan(lanes, 3); got[0] != 3 || got[1] != 0 {
		t.Errorf("plan of 3 slots at 10:1: %v, want the heavy lane first", got)
	}
	if lanes[0].pass != 0 || lanes[1].pass != 0 || s.vtime != 0 {
		t.Error("plan changed the lanes")
	}
}

func TestParseLane(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want Lane
		bad  bool
	}{
		{in: "batch", want: Lane{"batch", 1}},
		{in: "interactive:10", want: Lane{"interactive", 10}},
		{in: "x:0", want: Lane{"x", 0}}, // the default weight, 1
		{in: "x:-1", bad: true},
		{in: "x:1001", bad: true},
		{in: "x:y", bad: true},
		{in: "a.b:1", bad: true},
		{in: ":3", bad: true},
	} {
		got, err := ParseLane(tc.in)
		if (err != nil) != tc.bad || (!tc.bad && got != tc.want) {
			t.Errorf("ParseLane(%q) = %+v, %v", tc.in, got, err)
		}
	}
}

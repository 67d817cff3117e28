package checker

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

// ev is one history event for the table.
type ev func(h *History)

func sub(key, id string, a Answer) ev {
	return func(h *History) { h.AddSubmit(Submit{Key: key, JobID: id, Answer: a, At: at(0)}) }
}

func st(id, status string, terminal bool, reqs int64, sec int) ev {
	return func(h *History) {
		h.AddStatus(Status{JobID: id, Status: status, Terminal: terminal, Requests: reqs, At: at(sec)})
	}
}

func gone(id string, sec int) ev {
	return func(h *History) { h.AddStatus(Status{JobID: id, NotFound: true, At: at(sec)}) }
}

func count(key string, n uint64) ev { return func(h *History) { h.SetTargetCount(key, n) } }

func term(group, node string, t uint64, leading bool) ev {
	return func(h *History) { h.AddTerm(group, node, t, leading, at(0)) }
}

func fence(id, dc string, tok uint64, sec int) ev {
	return func(h *History) { h.AddFence(Fence{JobID: id, Datacenter: dc, Token: tok, At: at(sec)}) }
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rules Rules
		evs   []ev
		// want lists the violated rules, in order; empty means PASS.
		want             []string
		lost, duplicated int
		unknownRan       int
	}{
		{name: "acked job ends once with the target's count",
			evs: []ev{sub("a", "j1", Acked), st("j1", "RUNNING", false, 10, 1), st("j1", "COMPLETED", true, 100, 2),
				st("j1", "COMPLETED", true, 100, 3), count("a", 100)}},
		{name: "acked job forgotten: the new leader answers not found",
			evs:  []ev{sub("a", "j1", Acked), st("j1", "RUNNING", false, 10, 1), gone("j1", 2), count("a", 4000)},
			want: []string{"lost"}, lost: 1},
		{name: "acked job never polled",
			evs:  []ev{sub("a", "j1", Acked), count("a", 0)},
			want: []string{"lost"}, lost: 1},
		{name: "acked job ends, then is forgotten",
			evs:  []ev{sub("a", "j1", Acked), st("j1", "COMPLETED", true, 5, 1), gone("j1", 2), count("a", 5)},
			want: []string{"lost"}, lost: 1},
		{name: "acked job resurrected after it ended",
			evs: []ev{sub("a", "j1", Acked), st("j1", "COMPLETED", true, 50, 1), st("j1", "RUNNING", false, 3, 2),
				st("j1", "COMPLETED", true, 60, 3), count("a", 110)},
			want: []string{"resurrected", "ended-twice", "count-mismatch"}, duplicated: 1},
		{name: "acked job's status goes back to running after it ended (stale status after failover)",
			evs: []ev{sub("a", "j1", Acked), st("j1", "COMPLETED", true, 50, 1), st("j1", "RUNNING", false, 50, 2),
				st("j1", "COMPLETED", true, 50, 3), count("a", 50)},
			want: []string{"resurrected"}},
		{name: "acked job ends twice with different outcomes",
			evs:  []ev{sub("a", "j1", Acked), st("j1", "FAILED", true, 50, 1), st("j1", "COMPLETED", true, 50, 2), count("a", 50)},
			want: []string{"ended-twice"}, duplicated: 1},
		{name: "target saw more than the job reports: run twice",
			evs:  []ev{sub("a", "j1", Acked), st("j1", "COMPLETED", true, 100, 1), count("a", 180)},
			want: []string{"count-mismatch"}, duplicated: 1},
		{name: "extra within the fencing allowance is reported, not a violation",
			rules:      Rules{MaxExtra: 100},
			evs:        []ev{sub("a", "j1", Acked), st("j1", "COMPLETED", true, 100, 1), count("a", 180)},
			duplicated: 1},
		{name: "job reports requests the target never saw",
			evs:  []ev{sub("a", "j1", Acked), st("j1", "COMPLETED", true, 100, 1), count("a", 90)},
			want: []string{"count-mismatch"}},
		{name: "statuses out of order are sorted by time",
			evs: []ev{sub("a", "j1", Acked), st("j1", "COMPLETED", true, 9, 5), st("j1", "RUNNING", false, 3, 1), count("a", 9)}},
		{name: "refused job that never ran",
			evs: []ev{sub("a", "", Refused), count("a", 0)}},
		{name: "refused job that ran anyway (no_quorum while a peer held it)",
			evs:  []ev{sub("a", "", Refused), count("a", 300)},
			want: []string{"refused-ran"}},
		{name: "refused job with an id seen running",
			evs:  []ev{sub("a", "j1", Refused), st("j1", "RUNNING", false, 0, 1), count("a", 0)},
			want: []string{"refused-ran"}},
		{name: "unknown answer: not running is fine",
			evs: []ev{sub("a", "", Unknown), count("a", 0)}},
		{name: "unknown answer without an id that ran is counted, not judged",
			evs: []ev{sub("a", "", Unknown), count("a", 40)}, unknownRan: 1},
		{name: "unknown answer with an id that ended is judged like an ack",
			evs:  []ev{sub("a", "j1", Unknown), st("j1", "COMPLETED", true, 10, 1), count("a", 20)},
			want: []string{"count-mismatch"}, duplicated: 1},
		{name: "leaders in distinct terms",
			evs: []ev{term("dc1", "m1", 1, true), term("dc1", "m2", 1, false), term("dc1", "m2", 2, true), term("dc1", "m1", 2, false)}},
		{name: "two leaders in one term",
			evs:  []ev{term("dc1", "m1", 3, true), term("dc1", "m2", 3, true)},
			want: []string{"two-leaders"}},
		{name: "same term number in two groups is not a conflict",
			evs: []ev{term("dc1", "m1", 3, true), term("dc2", "m4", 3, true), term("gates", "g1", 3, true)}},
		{name: "a node's term goes back",
			evs:  []ev{term("dc1", "m1", 4, false), term("dc1", "m1", 2, false)},
			want: []string{"term-regressed"}},
		{name: "fence tokens grow or stay",
			evs: []ev{fence("j1", "dc1", 1<<32|1, 1), fence("j1", "dc1", 1<<32|1, 2), fence("j1", "dc1", 2<<32|1, 3), fence("j1", "dc2", 1<<32|2, 4)}},
		{name: "fence token goes back",
			evs:  []ev{fence("j1", "dc1", 2<<32|1, 1), fence("j1", "dc1", 1<<32|1, 2), fence("j1", "dc1", 1<<32|1, 3)},
			want: []string{"fence-regressed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := New()
			for _, e := range tc.evs {
				e(h)
			}
			v := h.Check(tc.rules)
			var got []string
			for _, x := range v.Violations {
				got = append(got, x.Rule)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("violations %v, want %v\n%s", got, tc.want, v)
			}
			if v.Lost != tc.lost || v.Duplicated != tc.duplicated {
				t.Errorf("lost %d duplicated %d, want %d and %d\n%s", v.Lost, v.Duplicated, tc.lost, tc.duplicated, v)
			}
			if v.UnknownRan != tc.unknownRan {
				t.Errorf("unknown that ran %d, want %d", v.UnknownRan, tc.unknownRan)
			}
			if v.OK() != (len(tc.want) == 0) || strings.HasPrefix(v.String(), "PASS") != v.OK() {
				t.Errorf("OK() = %v for %s", v.OK(), v)
			}
		})
	}
}

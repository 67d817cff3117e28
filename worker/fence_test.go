package worker

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"tempest/wire"
)

func TestFenceTable(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	type step struct {
		op    string // dispatch (check+start), check, cancel, finish, tomb, sweep
		wf    string
		token uint64
		at    time.Duration // since t0
		stale bool          // for check/dispatch/cancel
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"newer accepted, older refused", []step{
			{op: "dispatch", wf: "a", token: 10},
			{op: "check", wf: "a", token: 9, stale: true},
			{op: "check", wf: "a", token: 10},              // the same dispatch again
			{op: "dispatch", wf: "a", token: 11},           // a newer leader adopts it
			{op: "check", wf: "a", token: 10, stale: true}, // now the old one is stale
			{op: "check", wf: "b", token: 1},               // other workflows are independent
		}},
		{"finished run not repeated", []step{
			{op: "dispatch", wf: "a", token: 10},
			{op: "finish", wf: "a"},
			{op: "check", wf: "a", token: 10, stale: true},
			{op: "check", wf: "a", token: 11},
		}},
		{"cancel fencing", []step{
			{op: "dispatch", wf: "a", token: 10},
			{op: "cancel", wf: "a", token: 9, stale: true},
			{op: "cancel", wf: "a", token: 10},
			{op: "cancel", wf: "a", token: 12},
			{op: "cancel", wf: "unknown", token: 1},
		}},
		{"tombstone refuses a late dispatch", []step{
			{op: "tomb", wf: "a", token: 10},
			{op: "check", wf: "a", token: 10, stale: true},
			{op: "check", wf: "a", token: 9, stale: true},
			{op: "check", wf: "a", token: 11},
		}},
		{"retention keeps, then the floor refuses", []step{
			{op: "dispatch", wf: "a", token: 10},
			{op: "finish", wf: "a", at: time.Minute},
			{op: "sweep", at: 5 * time.Minute},             // within retention: kept
			{op: "check", wf: "a", token: 10, stale: true}, // precisely
			{op: "sweep", at: 12 * time.Minute},            // dropped
			{op: "check", wf: "a", token: 10, stale: true}, // by the floor
			{op: "check", wf: "zz", token: 7, stale: true}, // older than anything forgotten
			{op: "check", wf: "zz", token: 11},             // newer is fine
		}},
		{"token 0 never accepted", []step{
			{op: "check", wf: "a", token: 0, stale: true},
			{op: "cancel", wf: "a", token: 0, stale: true},
		}},
		{"running entries never swept", []step{
			{op: "dispatch", wf: "a", token: 10},
			{op: "sweep", at: time.Hour},
			{op: "check", wf: "a", token: 9, stale: true},
			{op: "check", wf: "b", token: 5},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFenceTable(10 * time.Minute)
			for i, st := range tc.steps {
				at := t0.Add(st.at)
				var err error
				switch st.op {
				case "dispatch":
					if err = f.CheckDispatch(st.wf, st.token); err == nil {
						f.Start(st.wf, st.token)
					}
				case "check":
					err = f.CheckDispatch(st.wf, st.token)
				case "cancel":
					err = f.CheckCancel(st.wf, st.token)
				case "finish":
					f.Finish(st.wf, at)
				case "tomb":
					f.Tombstone(st.wf, st.token, at)
				case "sweep":
					f.Sweep(at)
				}
				if err != nil && !errors.Is(err, wire.ErrStaleFence) && !(st.token == 0 && wire.CodeOf(err) == wire.CodeRejected) {
					t.Fatalf("step %d (%s %s %d): untyped error %v", i, st.op, st.wf, st.token, err)
				}
				if (err != nil) != st.stale {
					t.Fatalf("step %d (%s %s %d): err = %v, want stale=%v", i, st.op, st.wf, st.token, err, st.stale)
				}
			}
		})
	}
}

func TestFenceTableBounded(t *testing.T) {
	f := NewFenceTable(time.Hour)
	f.maxEntries = 100
	t0 := time.Unix(1_700_000_000, 0)
	f.Start("running", 1) // never evicted
	for i := range 1000 {
		id := fmt.Sprintf("wf-%d", i)
		tok := uint64(i + 10)
		if err := f.CheckDispatch(id, tok); err != nil {
			t.Fatalf("dispatch %d: %v", i, err)
		}
		f.Start(id, tok)
		f.Finish(id, t0.Add(time.Duration(i)*time.Second))
	}
	if f.Len() > 101 {
		t.Fatalf("%d entries kept, cap 100", f.Len())
	}
	if _, ok := f.Token("running"); !ok {
		t.Fatal("a running workflow's entry was evicted")
	}
	// Evicted workflows are still refused, through the floor.
	if err := f.CheckDispatch("wf-0", 10); !errors.Is(err, wire.ErrStaleFence) {
		t.Fatalf("evicted workflow re-dispatched: %v", err)
	}
	if f.Floor() == 0 {
		t.Fatal("eviction did not raise the floor")
	}
}

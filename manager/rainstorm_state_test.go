package manager

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"tempest/internal/testutil"
	"tempest/rainstorm"
	"tempest/rainstorm/ckpt"
	"tempest/wire"
)

// stateDelta is a count task's delta of n new keys (from from), each key
// long enough that four deltas make a state over the transport's cap.
func stateDelta(from, n int) []wire.RainstormGroupState {
	byGroup := map[int][]wire.RainstormAggregate{}
	pad := strings.Repeat("p", 200)
	for i := from; i < from+n; i++ {
		k := fmt.Sprintf("key-%07d-%s", i, pad)
		g := rainstorm.KeyGroup(k)
		byGroup[g] = append(byGroup[g], wire.RainstormAggregate{Key: k, Count: int64(i%7 + 1)})
	}
	var gs []wire.RainstormGroupState
	for g := range ckpt.KeyGroups {
		if es := byGroup[g]; len(es) > 0 { // keys in order already: same prefix, rising numbers
			gs = append(gs, wire.RainstormGroupState{Group: g, Entries: es})
		}
	}
	return gs
}

// A task's state over the transport's 10 MiB cap moves only in parts, and
// every part goes through the transport (the hub decodes each message
// under the cap, as QUIC does): a peer that missed a group gets the whole
// state in parts, a new leader reads its peers' stores in parts, and a
// replacement's open reads the state in parts and gets every key.
func TestRainstormStateOverMessageCap(t *testing.T) {
	p := newOnePipeline(t)
	c, lead, task, inc := p.c, p.lead, p.task, p.inc
	caller := c.hub.Node("w1")
	call := func(m *Manager, msg wire.Message) (wire.Message, error) {
		var resp wire.Message
		var err error
		testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			resp, err = caller.Call(ctx, m.cfg.ID, msg)
			var we *wire.Error
			if errors.As(err, &we) && (we.Code == wire.CodeUnavailable || we.Code == wire.CodeNoQuorum) {
				return err // syncing, or a round that timed out under load: the task sends again
			}
			return nil
		})
		return resp, err
	}
	// open reads the task's checkpoint as a worker does: part by part.
	open := func(m *Manager) (*wire.RainstormCheckpoint, int) {
		t.Helper()
		var j ckpt.Joiner
		for part := 0; ; part++ {
			resp, err := call(m, &wire.RainstormOpen{Task: task, Incarnation: inc, Part: part})
			if err != nil {
				t.Fatalf("open part %d: %v", part, err)
			}
			r := resp.(*wire.RainstormOpenReply)
			if r.Checkpoint == nil {
				return nil, part
			}
			whole, err := j.Add(r.Checkpoint)
			if err != nil {
				t.Fatalf("open part %d: %v", part, err)
			}
			if whole != nil {
				return whole, part + 1
			}
		}
	}
	if c, _ := open(lead); c != nil {
		t.Fatalf("fresh open: %+v", c)
	}
	const perDelta = 13_000 // about 2.8 MB of entries each
	var want []wire.RainstormGroupState
	put := func(m *Manager, version int) {
		t.Helper()
		d := stateDelta((version-1)*perDelta, perDelta)
		want = ckpt.ComposeGroups(want, d)
		ck := &wire.RainstormCheckpoint{Task: task, Incarnation: inc, Version: uint64(version),
			Inputs: []wire.RainstormInput{{Next: uint64(version + 1)}}, Groups: d}
		resp, err := call(m, ck)
		if err != nil {
			t.Fatalf("checkpoint %d: %v", version, err)
		}
		if a := resp.(*wire.RainstormCheckpointAck); a.Refused {
			t.Fatalf("checkpoint %d refused: %s", version, a.Reason)
		}
	}
	put(lead, 1)
	put(lead, 2)
	// One peer misses version 3: it gets version 4 as a whole state, over
	// the cap, in parts.
	var behind string
	for _, m := range c.running() {
		if m != lead {
			behind = m.cfg.ID
			break
		}
	}
	c.hub.SetHook(func(_, to string, msg wire.Message) bool {
		return to != behind || msg.Type() != wire.TypeRainstormReplicate
	})
	put(lead, 3)
	c.hub.SetHook(nil)
	put(lead, 4)
	b, err := wire.Marshal(&wire.RainstormCheckpoint{Groups: want})
	if err != nil {
		t.Fatal(err)
	}
	if len(b) <= wire.MaxMessageSize {
		t.Fatalf("the state is %d bytes: not over the cap, the test proves nothing", len(b))
	}
	for _, m := range c.running() {
		testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
			l := m.rs.Latest(task)
			if l == nil || l.Version != 4 {
				return fmt.Errorf("%s holds %+v", m.cfg.ID, l)
			}
			if !reflect.DeepEqual(l.Groups, want) {
				return fmt.Errorf("%s holds version 4 with %d groups, want %d", m.cfg.ID, len(l.Groups), len(want))
			}
			return nil
		})
	}
	got, parts := open(lead)
	if parts < 3 || got == nil || !reflect.DeepEqual(got.Groups, want) {
		t.Fatalf("open read %d parts, state equal %v", parts, got != nil && reflect.DeepEqual(got.Groups, want))
	}

	// A new leader reads its peers' stores (paged) and serves the state.
	c.stopManager(lead.cfg.ID)
	next := c.leader()
	got, parts = open(next)
	if parts < 3 || got == nil || got.Version != 4 || !reflect.DeepEqual(got.Groups, want) {
		t.Fatalf("after a leader change: open read %d parts, version %v", parts, got)
	}
	// And the store reloads it from disk, entry by entry.
	c.stopManager(next.cfg.ID)
	again := c.startManager(next.cfg.ID)
	if l := again.rs.Latest(task); l == nil || !reflect.DeepEqual(l.Groups, want) {
		t.Fatal("the reloaded store lost entries")
	}
}

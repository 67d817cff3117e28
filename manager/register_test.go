package manager

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"tempest/transport"
	"tempest/wire"
)

// A worker that registers before SWIM knows it is pulled into the
// membership by the manager it registers with, so that a failure detector
// watches it before it gets work; when its SWIM address does not answer,
// the registration is refused (the worker retries). A worker SWIM already
// knows, or one announcing no SWIM address, registers without a join.
func TestRegistrationJoinsAWorkerSWIMDoesNotKnow(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	l := c.leader()
	register := func(id, swimAddr string) *wire.RegistrationAck {
		t.Helper()
		reg := &wire.WorkerRegistration{NodeID: id, Addr: id, SwimAddr: swimAddr, Datacenter: "dc1", TotalCores: 2, Version: 1}
		resp, err := l.handleRegistration(context.Background(), transport.Peer{NodeID: id}, reg)
		if err != nil {
			t.Fatal(err)
		}
		return resp.(*wire.RegistrationAck)
	}
	joins := func() []string {
		c.members.mu.Lock()
		defer c.members.mu.Unlock()
		return slices.Clone(c.members.joins)
	}
	registered := func(id string) bool {
		wv, ok := l.workers.get(id)
		return ok && wv.Registered
	}

	tests := []struct {
		name, id, swimAddr string
		member             bool
		joinErr            error
		wantJoin           bool
		wantAccepted       bool
	}{
		{name: "unknown to SWIM: joined, then registered", id: "w-new", swimAddr: "10.0.0.1:7946", wantJoin: true, wantAccepted: true},
		{name: "unknown, its SWIM address silent: refused", id: "w-silent", swimAddr: "10.0.0.2:7946", joinErr: errors.New("connection refused"), wantJoin: true},
		{name: "already a member: no join", id: "w-member", swimAddr: "10.0.0.3:7946", member: true, wantAccepted: true},
		{name: "no SWIM address: registered as before", id: "w-bare", wantAccepted: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c.members.mu.Lock()
			c.members.joins, c.members.joinErr = nil, tc.joinErr
			if c.members.workers == nil {
				c.members.workers = make(map[string]bool)
			}
			c.members.workers[tc.id] = tc.member
			c.members.mu.Unlock()

			ack := register(tc.id, tc.swimAddr)
			if got := slices.Contains(joins(), tc.swimAddr); got != tc.wantJoin {
				t.Fatalf("joined %v, want a join of %q: %v", joins(), tc.swimAddr, tc.wantJoin)
			}
			if ack.Accepted != tc.wantAccepted || registered(tc.id) != tc.wantAccepted {
				t.Fatalf("ack %+v, registered %v; want accepted %v", ack, registered(tc.id), tc.wantAccepted)
			}
			if !tc.wantAccepted && !strings.Contains(ack.Error, "SWIM") {
				t.Fatalf("refusal does not say why: %q", ack.Error)
			}
		})
	}
}

package gate

import (
	"strings"
	"testing"
	"time"

	"tempest/wire"
)

func TestChooseDatacenters(t *testing.T) {
	health := []dcHealth{
		{Name: "east", Healthy: true, AvailableCores: 4},
		{Name: "north", Healthy: false},
		{Name: "south", Healthy: true, AvailableCores: 16},
		{Name: "west", Healthy: true, AvailableCores: 8},
	}
	tests := []struct {
		name  string
		names []string
		count int
		want  []string
		code  wire.Code
	}{
		{"one by default, the roomiest", nil, 0, []string{"south"}, 0},
		{"two roomiest, sorted", nil, 2, []string{"south", "west"}, 0},
		{"named", []string{"east", "west"}, 0, []string{"east", "west"}, 0},
		{"named unknown", []string{"mars"}, 0, nil, wire.CodeRejected},
		{"named unhealthy", []string{"north"}, 0, nil, wire.CodeUnavailable},
		{"more than healthy", nil, 4, nil, wire.CodeUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := chooseDatacenters(health, tt.names, tt.count)
			if tt.code != 0 {
				if wire.CodeOf(err) != tt.code {
					t.Fatalf("err %v, want code %s", err, tt.code)
				}
				return
			}
			if err != nil || strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestDCTableLeaderAndHealth(t *testing.T) {
	now := time.Unix(1000, 0)
	tb := newDCTable(func() time.Time { return now })
	tb.heartbeat(&wire.ManagerHeartbeat{NodeID: "e1", Datacenter: "east", IsLeader: true, Term: 3, Version: 1, Addr: "e1:1", AvailableCores: 6, WorkerCount: 3})
	tb.heartbeat(&wire.ManagerHeartbeat{NodeID: "e2", Datacenter: "east", Term: 3, Version: 1, Addr: "e2:1"})
	tb.heartbeat(&wire.ManagerHeartbeat{NodeID: "w1", Datacenter: "west", Term: 1, Version: 1, Addr: "w1:1"})
	if got := tb.targets("east"); strings.Join(got, ",") != "e1:1,e2:1" {
		t.Errorf("targets east = %v, want the leader first", got)
	}
	h := tb.health(10 * time.Second)
	if len(h) != 2 || !h[0].Healthy || h[0].Leader != "e1" || h[0].AvailableCores != 6 || h[1].Healthy {
		t.Fatalf("health = %+v", h)
	}
	// A newer term's leader replaces the old claim; a stale version is ignored.
	tb.heartbeat(&wire.ManagerHeartbeat{NodeID: "e2", Datacenter: "east", IsLeader: true, Term: 4, Version: 2, Addr: "e2:1"})
	tb.heartbeat(&wire.ManagerHeartbeat{NodeID: "e1", Datacenter: "east", IsLeader: true, Term: 3, Version: 1, Addr: "e1:1"})
	if got := tb.targets("east"); got[0] != "e2:1" {
		t.Errorf("targets east = %v, want the new leader first", got)
	}
	// Silence makes a datacenter unhealthy.
	now = now.Add(11 * time.Second)
	for _, d := range tb.health(10 * time.Second) {
		if d.Healthy {
			t.Errorf("%s still healthy after 11 s of silence", d.Name)
		}
	}
}

package worker

import (
	"strings"
	"tempest/internal/nodeconfig"
	"testing"
	"time"
)

func TestDefaultConfigNeedsOnlyIdentity(t *testing.T) {
	c := DefaultConfig()
	c.ID, c.Managers = "w1", []string{"127.0.0.1:7400"}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults plus id and managers: %v", err)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := Config{
		Node: nodeconfig.Node{
			QUICListen:  "nohostport",
			SwimBind:    "localhost:7946",
			SwimProfile: "warp",
			Join:        []string{"a:1", "b"},
		},
		Managers:         []string{""},
		Cores:            0,
		QueueSoftLimit:   -1,
		DegradedCPU:      120,
		DegradedMem:      50,
		CriticalMem:      40,
		DegradedLHM:      -1,
		ProgressInterval: 0,
		HealthInterval:   -time.Second,
	}
	err := c.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, field := range []string{"ID", "Datacenter", "QUICListen", "SwimBind", "SwimProfile", "Join", "Managers", "Cores",
		"QueueSoftLimit", "DegradedCPU", "CriticalMem", "DegradedLHM", "HealthSamples", "ProgressInterval", "HealthInterval",
		"DrainTimeout", "CallTimeout", "FenceRetention"} {
		if !strings.Contains(err.Error(), field+":") {
			t.Errorf("no problem reported for %s in:\n%v", field, err)
		}
	}
	if strings.Contains(err.Error(), "DegradedMem:") {
		t.Errorf("DegradedMem 50 is valid but was reported:\n%v", err)
	}
}

// A worker's id follows the rule of every node's (nodeconfig.CheckID): ids
// go into SWIM names and id=addr lists, so they hold no separators.
func TestIDIsANodeID(t *testing.T) {
	for _, id := range []string{"w 1", "w/1", "w=1", "w,1", strings.Repeat("w", 65)} {
		c := DefaultConfig()
		c.ID, c.Managers = id, []string{"127.0.0.1:7400"}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "ID:") {
			t.Errorf("id %q: err = %v, want an ID problem", id, err)
		}
	}
}

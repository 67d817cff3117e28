package main

import (
	"encoding/json"
	"strings"
	"testing"

	"tempest/api"
)

// members add and remove drive the API and print the group after the
// change; cluster prints each group's configuration after the nodes.
func TestMembersAndClusterGroups(t *testing.T) {
	c := newCLI(t)
	c.backend.SetCluster(api.ClusterView{
		Nodes: []api.NodeView{{Name: "m1", Role: "manager", DC: "dc1", State: "alive", IsLeader: true, Term: 3}},
		Groups: []api.GroupView{{Name: "managers/dc1", Epoch: 2, Quorum: 2, Members: []api.MemberView{
			{ID: "m1", Addr: "10.0.0.1:7401", Voter: true, State: api.MemberLeader},
			{ID: "m2", Addr: "10.0.0.2:7401", Voter: true, State: api.MemberFollower},
			{ID: "m3", Addr: "10.0.0.3:7401", Voter: true, State: api.MemberUnreachable},
		}}},
	})
	code, stdout, stderr := c.run(runMembers, "add", "m4", "10.0.0.4:7401")
	want := `managers/dc1: configuration epoch 3, quorum 2 of 3 voters
  MEMBER  ADDR           VOTER  STATE
  m1      10.0.0.1:7401  yes    LEADER
  m2      10.0.0.2:7401  yes    FOLLOWER
  m3      10.0.0.3:7401  yes    UNREACHABLE
  m4      10.0.0.4:7401  no     SYNCING
`
	if code != exitOK || stdout != want {
		t.Fatalf("members add: exit %d, stderr %q, stdout:\n%s\nwant:\n%s", code, stderr, stdout, want)
	}
	code, stdout, _ = c.run(runMembers, "remove", "m3", "--json")
	var g api.GroupView
	if err := json.Unmarshal([]byte(stdout), &g); code != exitOK || err != nil || g.Epoch != 4 || len(g.Members) != 3 {
		t.Fatalf("members remove --json: exit %d, %v, %+v", code, err, g)
	}
	code, stdout, _ = c.run(runCluster)
	if code != exitOK || !strings.Contains(stdout, "\nmanagers/dc1: configuration epoch 4, quorum 2 of 2 voters\n") ||
		!strings.Contains(stdout, "m4      10.0.0.4:7401  no     SYNCING") {
		t.Fatalf("cluster: exit %d, stdout:\n%s", code, stdout)
	}
	// Refusals: the server's, and the ones the CLI makes itself.
	if code, _, stderr := c.run(runMembers, "remove", "m9"); code != exitUsage || !strings.Contains(stderr, "no such member") {
		t.Errorf("remove of a stranger: exit %d, stderr %q", code, stderr)
	}
	for _, args := range [][]string{{}, {"join", "m5"}, {"add", "m5"}, {"add", "m5", "nohost"}, {"remove"}} {
		if code, _, _ := c.run(runMembers, args...); code != exitUsage {
			t.Errorf("members %v: exit %d, want usage", args, code)
		}
	}
}

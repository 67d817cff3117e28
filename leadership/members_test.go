package leadership

import (
	"slices"
	"strings"
	"testing"
)

func TestCheckMembers(t *testing.T) {
	ok := []Member{{"a", "1"}, {"b", "2"}, {"c", "3"}}
	if err := CheckMembers("a", "gate", ok); err != nil {
		t.Fatal(err)
	}
	if err := CheckMembers("a", "gate", nil); err != nil {
		t.Fatalf("empty list: %v", err)
	}
	err := CheckMembers("z", "manager", []Member{{"a", ""}, {"a", "1"}})
	for _, want := range []string{"Peers[0]: id and quic address are both required", `Peers[1]: duplicate id "a"`, `must include this manager "z"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	for n, want := range map[int]int{1: 1, 3: 2, 4: 3, 5: 3} {
		if got := NewGroup("a", make([]Member, n)).Quorum; got != want {
			t.Errorf("quorum of %d = %d, want a majority, %d", n, got, want)
		}
	}
	g := NewGroup("b", ok)
	if g.Quorum != 2 || len(g.All) != 3 || !slices.Equal(g.OtherIDs, []string{"a", "c"}) || g.Others["c"] != "3" {
		t.Fatalf("group = %+v", g)
	}
}

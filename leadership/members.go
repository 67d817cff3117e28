package leadership

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Member is one configured member of an election group, as the roles'
// config files list them (peers: [{id, quic}]). The configured list, not
// the live one, fixes the quorum.
type Member struct {
	ID   string `yaml:"id"`
	QUIC string `yaml:"quic"`
}

// CheckMembers reports every problem with a configured member list at once:
// an entry without id or address, a duplicate id, or self (a role's node
// id; what names it in messages) missing. An empty list is valid: a group
// of one.
func CheckMembers(self, what string, members []Member) error {
	var errs []error
	seen := map[string]bool{}
	found := false
	for i, p := range members {
		if p.ID == "" || p.QUIC == "" {
			errs = append(errs, fmt.Errorf("Peers[%d]: id and quic address are both required, got %q=%q", i, p.ID, p.QUIC))
		}
		if seen[p.ID] {
			errs = append(errs, fmt.Errorf("Peers[%d]: duplicate id %q", i, p.ID))
		}
		seen[p.ID] = true
		found = found || p.ID == self
	}
	if len(members) > 0 && !found {
		errs = append(errs, fmt.Errorf("Peers: must include this %s %q", what, self))
	}
	return errors.Join(errs...)
}

// Group is a member list as a role uses it.
type Group struct {
	All      map[string]string // every member's address by id: ElectorConfig.Peers
	Others   map[string]string // the other members' addresses by id
	OtherIDs []string          // Others' ids, sorted
	Quorum   int               // a majority of the configured size
}

// NewGroup indexes a checked member list for self.
func NewGroup(self string, members []Member) Group {
	g := Group{All: map[string]string{}, Others: map[string]string{}, Quorum: len(members)/2 + 1}
	for _, p := range members {
		g.All[p.ID] = p.QUIC
		if p.ID != self {
			g.Others[p.ID] = p.QUIC
		}
	}
	g.OtherIDs = slices.Sorted(maps.Keys(g.Others))
	return g
}

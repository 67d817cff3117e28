package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// GroupView is an election group (a datacenter's managers, or the gates) as
// the answering member has it: the configuration in effect, its epoch, and
// what each member is doing.
type GroupView struct {
	Name    string       `json:"name"` // "managers/<dc>" or "gates"
	Epoch   uint64       `json:"epoch"`
	Quorum  int          `json:"quorum"` // a majority of the voters
	Members []MemberView `json:"members"`
}

// Member states in a GroupView.
const (
	MemberLeader      = "LEADER"
	MemberFollower    = "FOLLOWER"
	MemberSyncing     = "SYNCING" // a learner: copying the group's state; votes and counts for nothing yet
	MemberUnreachable = "UNREACHABLE"
)

// MemberView is one configured member.
type MemberView struct {
	ID    string `json:"id"`
	Addr  string `json:"addr"` // QUIC
	Voter bool   `json:"voter"`
	State string `json:"state"`
}

// NewGroupView describes a group for the API: members are the configured
// voters and learners (ID, Addr and Voter set), leader the one this member
// follows, and reachable whether the failure detector sees a member alive.
// Each member gets its state; they come out sorted by id.
func NewGroupView(name string, epoch uint64, quorum int, leader string, members []MemberView, reachable func(id string) bool) *GroupView {
	v := &GroupView{Name: name, Epoch: epoch, Quorum: quorum, Members: members}
	for i := range v.Members {
		mv := &v.Members[i]
		switch {
		case mv.ID == leader:
			mv.State = MemberLeader
		case !reachable(mv.ID):
			mv.State = MemberUnreachable
		case !mv.Voter:
			mv.State = MemberSyncing
		default:
			mv.State = MemberFollower
		}
	}
	slices.SortFunc(v.Members, func(a, b MemberView) int { return strings.Compare(a.ID, b.ID) })
	return v
}

// MemberChange names a member to add: its node id and QUIC address.
type MemberChange struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
}

// Check reports what is wrong with a member to add.
func (mc MemberChange) Check() error {
	var errs []error
	if mc.ID == "" || strings.ContainsAny(mc.ID, "/ \t\n") {
		errs = append(errs, fmt.Errorf("id %q: must be a non-empty node id without spaces or slashes", mc.ID))
	}
	if _, port, err := net.SplitHostPort(mc.Addr); err != nil || port == "" || port == "0" {
		errs = append(errs, fmt.Errorf("addr %q: must be the member's QUIC host:port", mc.Addr))
	}
	return errors.Join(errs...)
}

// MembersBackend is implemented by backends whose group can change while it
// runs. Both calls return once the change is in effect on the leader; an
// added member is SYNCING until the leader promotes it.
type MembersBackend interface {
	AddMember(ctx context.Context, mc MemberChange) (*GroupView, error)
	RemoveMember(ctx context.Context, id string) (*GroupView, error)
}

// maxMemberBody bounds a member change's body: an id and an address.
const maxMemberBody = 4 << 10

// DecodeMemberChange reads a member to add from a client's body: one JSON
// object, no unknown fields, nothing after it, checked (MemberChange.Check).
func DecodeMemberChange(r io.Reader) (MemberChange, error) {
	var mc MemberChange
	dec := json.NewDecoder(io.LimitReader(r, maxMemberBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&mc); err != nil {
		return MemberChange{}, fmt.Errorf("body: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return MemberChange{}, errors.New("body: trailing data after the JSON object")
	}
	if err := mc.Check(); err != nil {
		return MemberChange{}, err
	}
	return mc, nil
}

func (s *Server) membersBackend(w http.ResponseWriter) (MembersBackend, bool) {
	mb, ok := s.backend.(MembersBackend)
	if !ok {
		writeErrorBody(w, http.StatusNotFound, ErrorBody{Code: CodeNotFound, Error: "this node's group cannot change at runtime"})
	}
	return mb, ok
}

func (s *Server) addMember(w http.ResponseWriter, r *http.Request) {
	mb, ok := s.membersBackend(w)
	if !ok {
		return
	}
	mc, err := DecodeMemberChange(r.Body)
	if err != nil {
		writeErrorBody(w, http.StatusBadRequest, ErrorBody{Code: CodeMalformed, Error: "member: " + err.Error()})
		return
	}
	ctx, cancel := s.callContext(r)
	defer cancel()
	view, err := mb.AddMember(ctx, mc)
	if err != nil {
		s.fail(w, r, fmt.Errorf("add member %s: %w", mc.ID, err))
		return
	}
	s.log.Info("member added", "member", mc.ID, "addr", mc.Addr, "epoch", view.Epoch)
	writeJSON(w, http.StatusOK, view)
}

func (s *Server) removeMember(w http.ResponseWriter, r *http.Request) {
	mb, ok := s.membersBackend(w)
	if !ok {
		return
	}
	id := r.PathValue("id")
	if id == "" {
		writeErrorBody(w, http.StatusBadRequest, ErrorBody{Code: CodeMalformed, Error: "member id missing"})
		return
	}
	ctx, cancel := s.callContext(r)
	defer cancel()
	view, err := mb.RemoveMember(ctx, id)
	if err != nil {
		s.fail(w, r, fmt.Errorf("remove member %s: %w", id, err))
		return
	}
	s.log.Info("member removed", "member", id, "epoch", view.Epoch)
	writeJSON(w, http.StatusOK, view)
}

// AddMember adds a member to the group the API's nodes belong to; it
// starts SYNCING (see GroupView).
func (c *Client) AddMember(ctx context.Context, mc MemberChange) (*GroupView, error) {
	body, err := json.Marshal(mc)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	// Not idempotent: a retry after an unknown outcome would answer
	// "already a member", which the caller can read as well.
	a, err := c.exchange(ctx, request{method: http.MethodPost, path: "/v1/members", body: body, header: h})
	if err != nil {
		return nil, err
	}
	var v GroupView
	return &v, decodeAnswer(a, &v)
}

// RemoveMember removes a member from the group.
func (c *Client) RemoveMember(ctx context.Context, id string) (*GroupView, error) {
	a, err := c.exchange(ctx, request{method: http.MethodDelete, path: "/v1/members/" + url.PathEscape(id)})
	if err != nil {
		return nil, err
	}
	var v GroupView
	return &v, decodeAnswer(a, &v)
}

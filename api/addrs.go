package api

import (
	"net"
	"sync/atomic"

	"tempest/wire"
)

// Addresses is how a role answers for API URLs: its own, known from its
// config or once its server binds a ":0" port, and other nodes', as its
// membership publishes them. Followers use it to send clients to the
// leader; gates and managers keep one each.
type Addresses struct {
	selfID string
	self   atomic.Pointer[string]
	lookup func(id string) string
}

// NewAddresses starts with this node's URL as its config gives it
// (AdvertisedURL) and lookup for other nodes ("" when unknown).
func NewAddresses(selfID, self string, lookup func(id string) string) *Addresses {
	a := &Addresses{selfID: selfID, lookup: lookup}
	a.self.Store(&self)
	return a
}

// AdvertisedURL is the API URL a node can publish before its server binds:
// advertise if set, else listen when it names a dialable host and a fixed
// port; "" otherwise (known once the server binds).
func AdvertisedURL(advertise, listen string) string {
	if advertise != "" {
		return advertise
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil || port == "0" || port == "" || host == "" || host == "0.0.0.0" || host == "::" {
		return ""
	}
	return "http://" + net.JoinHostPort(host, port)
}

// Self is this node's API URL ("" until known).
func (a *Addresses) Self() string { return *a.self.Load() }

// SetSelf records this node's API URL once its server bound.
func (a *Addresses) SetSelf(url string) { a.self.Store(&url) }

// Of is node id's API URL, "" when unknown.
func (a *Addresses) Of(id string) string {
	if id == a.selfID {
		return a.Self()
	}
	if a.lookup == nil {
		return ""
	}
	return a.lookup(id)
}

// NotLeader turns a role's NotLeader error (naming the leader's node id)
// into one for API callers: LeaderAddr is the leader's API URL, not its
// QUIC address.
func (a *Addresses) NotLeader(e *wire.Error) *wire.Error {
	e.LeaderAddr = ""
	if e.Leader != "" {
		e.LeaderAddr = a.Of(e.Leader)
	}
	return e
}

// Leader answers Backend.Leader for a role: this node's URL when it leads,
// else the URL of the leader its election names ("" when none).
func (a *Addresses) Leader(leading bool, leaderID string) (bool, string) {
	if leading {
		return true, a.Self()
	}
	if leaderID == "" {
		return false, ""
	}
	return false, a.Of(leaderID)
}

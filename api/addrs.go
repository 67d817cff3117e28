package api

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"tempest/wire"
)

// Addresses is how a role answers for API URLs: its own, known from its
// config or once its server binds a ":0" port, and its peers', as each
// peer told it over the sealed transport (wire.LeaderAPI, Learn). Followers
// use it to send clients to the leader, and forward their requests there
// with the client's Authorization header; gates and managers keep one each.
// Nothing learnt from gossip goes in: SWIM metadata can be written by any
// holder of a worker's key, and a forged URL would collect bearer tokens.
type Addresses struct {
	selfID string
	self   atomic.Pointer[string]

	mu     sync.Mutex
	learnt map[string]string // peer id -> URL it sent itself
}

// NewAddresses starts with this node's URL as its config gives it
// (AdvertisedURL) and no peer's.
func NewAddresses(selfID, self string) *Addresses {
	a := &Addresses{selfID: selfID, learnt: map[string]string{}}
	a.self.Store(&self)
	return a
}

// Learn records url as peer id's API URL. Call it only with what id itself
// sent over an authenticated link, and only for a configured peer of the
// role. A URL that is not http(s)://host[:port] is refused.
func (a *Addresses) Learn(id, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("api url of %s: %w", id, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return fmt.Errorf("api url of %s: %q, want http(s)://host:port", id, raw)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.learnt[id] = raw
	return nil
}

// AnnounceEvery is how often a leader tells its peers its API URL: a
// follower that starts, or restarts, learns it within this.
const AnnounceEvery = time.Second

// Announce tells each peer (by transport address) this leader's API URL,
// at once and then every AnnounceEvery until ctx ends (the leader's term).
// A failed send is tried again at the next round; the URL is sent only
// once this node knows it.
//
// peers is read every round: a member added meanwhile hears the next one.
func (a *Addresses) Announce(ctx context.Context, term uint64, peers func() []string, send func(ctx context.Context, addr string, msg wire.Message) error) {
	t := time.NewTicker(AnnounceEvery)
	defer t.Stop()
	for {
		if self := a.Self(); self != "" {
			msg := &wire.LeaderAPI{Term: term, URL: self}
			for _, addr := range peers() {
				sctx, cancel := context.WithTimeout(ctx, AnnounceEvery)
				_ = send(sctx, addr, msg) // a peer that missed it hears the next round
				cancel()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
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
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.learnt[id]
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

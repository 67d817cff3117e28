package leadership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"tempest/transport"
)

// SeatConfig is what a role (a gate, a manager) gives OpenSeat.
type SeatConfig struct {
	// ID is the role's node id: its transport id and election member id.
	ID string
	// Members is the configured group; empty means this node alone, at its
	// transport's address.
	Members []Member
	// Transport, when set (tests), is used as it is and not closed by the
	// seat; otherwise the seat opens a QUIC transport with QUIC and owns it.
	Transport transport.Transport
	QUIC      transport.Config
	// Storage, when set, keeps term and vote; otherwise the seat opens
	// "election.db" in DataDir and owns it.
	Storage Storage
	DataDir string
	// Elector configures the election; its Transport, Peers and Storage are
	// the seat's.
	Elector ElectorConfig
}

// Seat is a role's place in its election group, opened the same way by the
// gate and the manager: the transport (given, or a QUIC one it owns), the
// group of configured members, the election storage (given, or bbolt in the
// data dir) and the elector over them. Close releases what it opened.
type Seat struct {
	Tr      transport.Transport
	Members []Member // the configured group, or this node alone
	Group   Group
	Elector *Elector

	ownTr    *transport.QUIC
	ownStore *BoltStorage
	log      *slog.Logger
}

// OpenSeat opens c's seat. On an error nothing it opened stays open.
func OpenSeat(c SeatConfig) (s *Seat, err error) {
	s = &Seat{Tr: c.Transport, log: c.Elector.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Close())
			s = nil
		}
	}()
	if s.Tr == nil {
		if s.ownTr, err = transport.NewQUIC(c.QUIC); err != nil {
			return s, fmt.Errorf("transport: %w", err)
		}
		s.Tr = s.ownTr
	}
	s.Members = c.Members
	if len(s.Members) == 0 {
		s.Members = []Member{{ID: c.ID, QUIC: s.Tr.Addr()}}
	}
	s.Group = NewGroup(c.ID, s.Members)
	store := c.Storage
	if store == nil {
		if s.ownStore, err = OpenBoltStorage(filepath.Join(c.DataDir, "election.db")); err != nil {
			return s, fmt.Errorf("election storage: %w", err)
		}
		store = s.ownStore
	}
	ecfg := c.Elector
	ecfg.Transport, ecfg.Peers, ecfg.Storage = s.Tr, s.Group.All, store
	if s.Elector, err = New(ecfg); err != nil {
		return s, err
	}
	return s, nil
}

// Run takes part in the election until ctx ends: a role runs it on a
// goroutine it owns, and stops the elector (Elector.Stop) at shutdown.
func (s *Seat) Run(ctx context.Context) {
	if err := s.Elector.Run(ctx); err != nil {
		s.log.Error("election stopped", "err", err)
	}
}

// HandOff is a planned stop's first step: a seat that leads hands its
// leadership to the best follower (Elector.Handoff) and waits, at most an
// election timeout or until ctx ends, for the successor to lead, so the
// group is leaderless for a round trip instead of the election timeout a
// crash costs. A seat that does not lead, or finds no successor, does
// nothing more: the group then elects one the ordinary way.
func (s *Seat) HandOff(ctx context.Context) {
	if !s.Elector.IsLeader() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.Elector.profile.ElectionTimeout())
	defer cancel()
	to, err := s.Elector.Handoff(ctx)
	if err != nil {
		s.log.Warn("planned stop: leadership not handed over; the group will elect a leader after an election timeout", "err", err)
		return
	}
	s.log.Info("planned stop: leadership handed over", "to", to)
}

// ElectionTimeout is the group's election timeout: how long a planned step
// (a handover, a removed member's exit) waits for the group to settle.
func (s *Seat) ElectionTimeout() time.Duration { return s.Elector.profile.ElectionTimeout() }

// Close closes the transport and the storage the seat opened (not the ones
// it was given), transport first: no message then reaches an elector whose
// storage is gone. The elector itself stops with its Run's context.
func (s *Seat) Close() error {
	var errs []error
	if s.ownTr != nil {
		errs = append(errs, s.ownTr.Close())
	}
	if s.ownStore != nil {
		errs = append(errs, s.ownStore.Close())
	}
	return errors.Join(errs...)
}

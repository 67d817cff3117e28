package manager

import (
	"context"
	"fmt"
	"sync"

	"tempest/transport"
	"tempest/wire"
)

// Batched provisioning.
//
// Placements run in parallel (placeAll), and each one needs a quorum round
// (ProvisionRequest) and a commit round (ProvisionCommit) with every peer;
// a workflow's end needs a round that stores it on a majority. Done one by
// one, that is several messages and, on each peer, a store commit per
// workflow. Instead the rounds are grouped (internal/rounds): a round
// starts at once while fewer than roundsInFlight rounds of its kind are on
// their way, and what arrives while that many are in flight waits for the
// first of them to end and then goes together, as one round. An idle
// leader adds no wait to a lone placement; a busy one sends one message per
// peer for many.
//
// Each placement in a batch is still judged on its own by every peer (its
// own worker, its own fence token), confirmed by a majority before its
// dispatch, and committed before it, exactly as a lone one: only the
// envelopes and the peers' store commits are shared.

// maxRoundBatch bounds the calls one round carries, well inside the wire's
// message size limit (a ProvisionRequest or ProvisionCommit is about a
// hundred bytes).
const maxRoundBatch = 256

// roundsInFlight is how many rounds of one kind may be on their way at
// once. With one, a placement arriving while a round is in flight waits for
// all of it, and the placements behind it queue (measured slower than no
// batching at all, bench/README.md); with two, a round is being answered
// while the next gathers, so arrivals wait at most about half a round.
const roundsInFlight = 2

// quorumAnswer is how the managers answered one placement's request, both
// counts including this manager.
type quorumAnswer struct {
	confirmed, answered int
	quorum, voters      int // the round's peer set: its majority and its voters, this manager included
	refusals            []string
}

// provisionRound asks every peer to confirm reqs, concurrently, and returns
// as soon as every request has a quorum of confirmations or every peer has
// answered. A lone request travels as a ProvisionRequest, several as one
// ProvisionBatch per peer.
func (m *Manager) provisionRound(ctx context.Context, reqs []wire.ProvisionRequest) []quorumAnswer {
	// Voters only: a learner (SYNCING) confirms nothing.
	peers := m.group.Load()
	out := make([]quorumAnswer, len(reqs))
	for i := range out {
		out[i] = quorumAnswer{confirmed: 1, answered: 1, quorum: peers.Quorum, voters: 1 + len(peers.VoterIDs)}
	}
	if len(peers.VoterIDs) == 0 {
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.QuorumTimeout)
	defer cancel()
	var msg wire.Message = &wire.ProvisionBatch{Requests: reqs}
	if len(reqs) == 1 {
		msg = &reqs[0]
	}
	type answer struct {
		peer     string
		confirms []wire.ProvisionConfirm
		err      error
	}
	results := make(chan answer, len(peers.VoterIDs))
	var wg sync.WaitGroup
	for _, id := range peers.VoterIDs {
		wg.Go(func() {
			resp, err := m.tr.Call(ctx, peers.Voters[id], msg)
			a := answer{peer: id, err: err}
			if err == nil {
				a.confirms, a.err = confirmsOf(resp, reqs)
			}
			results <- a
		})
	}
	defer wg.Wait() // after cancel (deferred later, runs first): stragglers end at once
	defer cancel()
	for range peers.VoterIDs {
		a := <-results
		if a.err != nil {
			m.log.Debug("provision request failed", "peer", a.peer, "placements", len(reqs), "workflow_id", reqs[0].WorkflowID, "err", a.err)
			continue
		}
		decided := true
		for i, c := range a.confirms {
			out[i].answered++
			if c.Confirmed {
				out[i].confirmed++
			} else {
				out[i].refusals = append(out[i].refusals, a.peer+": "+c.Error)
			}
			decided = decided && out[i].confirmed >= peers.Quorum
		}
		if decided {
			break
		}
	}
	return out
}

// confirmsOf checks that resp answers reqs: one confirm per request, in
// order.
func confirmsOf(resp wire.Message, reqs []wire.ProvisionRequest) ([]wire.ProvisionConfirm, error) {
	var confirms []wire.ProvisionConfirm
	switch r := resp.(type) {
	case *wire.ProvisionConfirm:
		confirms = []wire.ProvisionConfirm{*r}
	case *wire.ProvisionBatchConfirm:
		confirms = r.Confirms
	default:
		return nil, fmt.Errorf("unexpected %T", resp)
	}
	if len(confirms) != len(reqs) {
		return nil, fmt.Errorf("%d confirms for %d requests", len(confirms), len(reqs))
	}
	for i := range confirms {
		if confirms[i].WorkflowID != reqs[i].WorkflowID {
			return nil, fmt.Errorf("confirm %d is for %s, not %s", i, confirms[i].WorkflowID, reqs[i].WorkflowID)
		}
	}
	return confirms, nil
}

// commitRound tells every peer about decided placements and waits (up to
// the quorum timeout) for them to persist them, so that whichever of them
// leads next knows them. A peer that misses them learns the placements
// from the workers in the next state sync.
func (m *Manager) commitRound(ctx context.Context, cs []wire.ProvisionCommit) []struct{} {
	var msg wire.Message = &wire.ProvisionCommitBatch{Commits: cs}
	if len(cs) == 1 {
		msg = &cs[0]
	}
	m.callPeers(ctx, msg, "provision commit not acknowledged", "placements", len(cs), "workflow_id", cs[0].WorkflowID)
	return make([]struct{}, len(cs))
}

// handleProvisionBatch is a peer's side of a batched quorum round: each
// request is judged as a lone ProvisionRequest would be.
func (m *Manager) handleProvisionBatch(ctx context.Context, from transport.Peer, b *wire.ProvisionBatch) (wire.Message, error) {
	if !m.isPeer(from.NodeID) {
		return nil, wire.Errorf(wire.CodeRejected, "%s is not a configured manager", from.NodeID)
	}
	if len(b.Requests) > maxRoundBatch {
		return nil, wire.Errorf(wire.CodeRejected, "%d placements in one batch, at most %d", len(b.Requests), maxRoundBatch)
	}
	out := &wire.ProvisionBatchConfirm{Confirms: make([]wire.ProvisionConfirm, 0, len(b.Requests))}
	for i := range b.Requests {
		resp, err := m.handleProvisionRequest(ctx, from, &b.Requests[i])
		if err != nil {
			return nil, err
		}
		out.Confirms = append(out.Confirms, *resp.(*wire.ProvisionConfirm))
	}
	return out, nil
}

// handleProvisionCommitBatch is a peer storing several decided placements
// in one store commit. Commits from a stale leader are refused one by one
// (the others stand: each carries its own token); a batch with none left
// to store is refused as a lone commit would be.
func (m *Manager) handleProvisionCommitBatch(_ context.Context, from transport.Peer, b *wire.ProvisionCommitBatch) (wire.Message, error) {
	if !m.isPeer(from.NodeID) {
		return nil, wire.Errorf(wire.CodeRejected, "%s is not a configured manager", from.NodeID)
	}
	if len(b.Commits) > maxRoundBatch {
		return nil, wire.Errorf(wire.CodeRejected, "%d commits in one batch, at most %d", len(b.Commits), maxRoundBatch)
	}
	ok := make([]*wire.ProvisionCommit, 0, len(b.Commits))
	var refused string
	for i := range b.Commits {
		if reason := m.staleLeaderReason(from.NodeID, b.Commits[i].FenceToken); reason != "" {
			refused = reason
			continue
		}
		ok = append(ok, &b.Commits[i])
	}
	if len(ok) == 0 && refused != "" {
		return nil, &wire.Error{Code: wire.CodeStaleFence, Message: refused}
	}
	err := m.update(func(tx *txn) {
		for _, c := range ok {
			m.applyCommitLocked(tx, c)
		}
	})
	if err != nil {
		return nil, wire.Errorf(wire.CodeUnavailable, "persist %d commits: %v", len(ok), err)
	}
	return &wire.CommitBatchAck{NodeID: m.cfg.ID, Stored: len(ok), Refused: len(b.Commits) - len(ok)}, nil
}

package worker

import (
	"context"

	"tempest/transport"
	"tempest/wire"
)

// handleStateSync serves StateSyncRequest: workers are the source of truth
// for what runs, so a newly elected leader rebuilds its view from these
// snapshots. The snapshot includes workflows that finished but whose final
// progress no manager has acknowledged yet, so their outcome is not lost in
// the election.
//
// A manager asks right after winning an election, so a request carrying a
// newer term than the worker knows also names the new leader; adopting it
// here sends pending final progress to it without waiting for a heartbeat.
func (w *Worker) handleStateSync(_ context.Context, from transport.Peer, req *wire.StateSyncRequest) (wire.Message, error) {
	if req.RequesterRole == wire.RoleManager && w.leader.adoptNewTerm(req.RequesterID, from.Addr, req.Term) {
		w.log.Info("leader changed (state sync from new term)", "leader", req.RequesterID, "addr", from.Addr, "term", req.Term)
	}
	if req.RequesterRole == wire.RoleManager {
		w.contact.touch(w.now()) // a leader syncing is a leader that will adopt this work
	}
	snap := w.Snapshot()
	return &wire.StateSyncResponse{ResponderID: w.cfg.ID, CurrentVersion: snap.Version, WorkerState: &snap}, nil
}

// Snapshot is the worker's state with the latest progress of every
// workflow on it.
func (w *Worker) Snapshot() wire.WorkerStateSnapshot {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := wire.WorkerStateSnapshot{
		NodeID:         w.cfg.ID,
		State:          w.stateLocked(),
		TotalCores:     w.cores.Total(),
		AvailableCores: w.cores.Available(),
		Version:        w.version,
	}
	if w.tr != nil {
		s.Addr = w.tr.Addr()
	}
	if len(w.execs) > 0 {
		s.ActiveWorkflows = make(map[string]wire.WorkflowProgress, len(w.execs))
		for id, e := range w.execs {
			s.ActiveWorkflows[id] = e.latest
		}
	}
	return s
}

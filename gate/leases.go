package gate

import (
	"context"
	"slices"
	"sync"
	"time"

	"tempest/internal/lifecycle"
	"tempest/leadership"
	"tempest/wire"
)

// takeOver moves every unfinished job's leases (or, with ids, those jobs'
// only) to this leader: new fence tokens from this term, fresh expiry (the
// datacenters have had no gate to report to), and a LeaseTransfer to each
// datacenter, which from then on refuses the old leader's commands. The
// moved leases are on a majority of gates before any datacenter hears of
// them (and, at the start of a term, before the term serves): a successor
// reads a majority, so it never shows or hands out an older token than one
// a datacenter holds. Storing is retried for as long as the term lasts.
func (g *Gate) takeOver(lt *leadership.Term, ids ...string) {
	now := g.now()
	var sends [][2]string
	var movedIDs []string
	var exhausted error
	moved := 0
	err := g.update(func(tx *txn) {
		jobs := g.jobs
		if len(ids) > 0 {
			jobs = make(map[string]*jobEntry, len(ids))
			for _, id := range ids {
				if j, ok := g.jobs[id]; ok {
					jobs[id] = j
				}
			}
		}
		for id, j := range jobs {
			if j.rec.Status.Terminal() || exhausted != nil {
				continue
			}
			took := false
			j.mutateLocked(func(rec *wire.GateJobRecord) {
				for i := range rec.Leases {
					l := &rec.Leases[i]
					pi := j.progressIndex(l.Datacenter)
					if pi >= 0 && rec.Datacenters[pi].Status.Terminal() {
						continue
					}
					if l.LeaseHolder == g.cfg.ID && leadership.TokenTerm(l.FenceToken) == lt.Number() {
						continue // already this term's
					}
					tok, err := lt.NextToken()
					if err != nil {
						// The rest stay with their holder and expire: a new
						// term is the only way to more tokens.
						exhausted = err
						break
					}
					l.LeaseHolder = g.cfg.ID
					l.FenceToken = tok
					l.ExpiresAt = now.Add(g.cfg.LeaseTTL).UnixNano()
					l.Version++
					j.send[l.Datacenter] = true
					sends = append(sends, [2]string{id, l.Datacenter})
					took = true
				}
			})
			if took {
				tx.commit(j)
				movedIDs = append(movedIDs, id)
				moved++
			}
		}
		if moved > 0 {
			g.log.Info("taking over leases", "jobs", moved, "leases", len(sends), "term", lt.Number())
		}
	})
	if exhausted != nil {
		g.log.Error("taking over leases: some left with their holder", "term", lt.Number(), "err", exhausted)
	}
	if moved == 0 {
		return
	}
	for backoff := 100 * time.Millisecond; err != nil; backoff = min(2*backoff, syncRetryMax) {
		g.log.Info("taken-over leases not on a majority of gates yet; datacenters not told", "term", lt.Number(), "retry_in", backoff, "err", err)
		if !lifecycle.Sleep(lt.Context(), backoff) {
			return
		}
		err = g.update(func(tx *txn) {
			for _, id := range movedIDs {
				if j, ok := g.jobs[id]; ok && j.rec.Version > j.storedVersion {
					tx.commit(j)
				}
			}
		})
	}
	var wg sync.WaitGroup
	for _, s := range sends {
		wg.Go(func() { g.sendToDC(lt, s[0], s[1]) })
	}
	wg.Wait()
}

// tickLoop is the leader's clock: expired leases fail their datacenter,
// and datacenters that have not taken a job (or a lease) yet are tried
// again. Finished jobs past retention are forgotten by every gate
// (retentionLoop).
func (g *Gate) tickLoop(lt *leadership.Term) {
	t := time.NewTicker(g.cfg.TickInterval)
	defer t.Stop()
	var sends sync.WaitGroup
	defer sends.Wait()
	for {
		select {
		case <-lt.Context().Done():
			return
		case <-t.C:
		}
		now := g.now()
		type dcRef struct{ id, dc, reason string }
		var expired, retry []dcRef
		g.view(func() {
			for id, j := range g.jobs {
				if j.rec.Status.Terminal() {
					continue
				}
				for _, l := range j.rec.Leases {
					pi := j.progressIndex(l.Datacenter)
					if pi < 0 || j.rec.Datacenters[pi].Status.Terminal() {
						continue
					}
					if now.UnixNano() > l.ExpiresAt {
						expired = append(expired, dcRef{id, l.Datacenter, ""})
						continue
					}
					if j.send[l.Datacenter] && !j.inFlight[l.Datacenter] {
						retry = append(retry, dcRef{id, l.Datacenter, ""})
					}
				}
			}
		})
		for _, e := range expired {
			g.failDC(e.id, e.dc, "lease expired: no progress from "+e.dc+" for "+g.cfg.LeaseTTL.String())
			sends.Go(func() {
				ctx, cancel := context.WithTimeout(lt.Context(), g.cfg.DispatchTimeout)
				defer cancel()
				// Best effort: the datacenter may be gone; if it comes back
				// its next report is answered with a cancel.
				g.callDC(ctx, e.dc, &wire.CancelJob{JobID: e.id, Reason: "lease expired at the gate", FenceToken: g.tokenOf(e.id, e.dc)})
			})
		}
		for _, r := range retry {
			sends.Go(func() { g.sendToDC(lt, r.id, r.dc) })
		}
	}
}

func (g *Gate) tokenOf(id, dc string) (token uint64) {
	g.view(func() {
		if j, ok := g.jobs[id]; ok {
			if i := j.leaseIndex(dc); i >= 0 {
				token = j.rec.Leases[i].FenceToken
			}
		}
	})
	return token
}

// leases lists a job's leases (tests read them).
func (g *Gate) leases(id string) (out []wire.DatacenterLease) {
	g.view(func() {
		if j, ok := g.jobs[id]; ok {
			out = slices.Clone(j.rec.Leases)
		}
	})
	return out
}

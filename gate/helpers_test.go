package gate

import (
	"sync/atomic"

	"tempest/transport"
	"tempest/wire"
)

// adopt takes in one record as if another gate had sent it (adoptLocked,
// written like every change), and returns the copy kept, or nil if it was
// not newer.
func (g *Gate) adopt(rec *wire.GateJobRecord) *wire.GateJobRecord {
	var out *wire.GateJobRecord
	if err := g.update(func(tx *txn) { out = g.adoptLocked(tx, rec) }); err != nil {
		panic("adopt: " + err.Error())
	}
	return out
}

// dropWhile makes hub drop every message of type M while on is set.
func dropWhile[M wire.Message](hub *transport.Hub, on *atomic.Bool) {
	hub.SetHook(func(_, _ string, msg wire.Message) bool {
		_, match := msg.(M)
		return !(match && on.Load())
	})
}

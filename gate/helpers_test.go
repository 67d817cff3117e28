package gate

import "tempest/wire"

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

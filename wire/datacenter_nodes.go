package wire

// A datacenter's workers as a gate shows them: a gate hears only managers
// (their heartbeats name a datacenter's totals, never its workers), so for
// `tempest cluster` it asks each datacenter's manager leader, whose worker
// table is the one that places work.

// DatacenterNodesRequest asks a manager leader for its worker table.
type DatacenterNodesRequest struct {
	Datacenter string `cbor:"1,keyasint,omitempty"`
}

// DatacenterNodes answers a DatacenterNodesRequest.
type DatacenterNodes struct {
	Datacenter string           `cbor:"1,keyasint,omitempty"`
	Workers    []DatacenterNode `cbor:"2,keyasint,omitempty"`
}

// DatacenterNode is one worker as its manager leader sees it. A worker the
// leader holds for dead has AvailableCores 0: its cores cannot take work.
type DatacenterNode struct {
	ID             string   `cbor:"1,keyasint"`
	State          string   `cbor:"2,keyasint,omitempty"` // HEALTHY/DEGRADED/DRAINING, or "dead"
	AvailableCores int      `cbor:"3,keyasint,omitempty"`
	TotalCores     int      `cbor:"4,keyasint,omitempty"`
	Addr           string   `cbor:"5,keyasint,omitempty"`
	SendKeyID      uint32   `cbor:"6,keyasint,omitempty"`
	AcceptKeyIDs   []uint32 `cbor:"7,keyasint,omitempty"`
	HeartbeatAgeMs int64    `cbor:"8,keyasint,omitempty"`
}

func (*DatacenterNodesRequest) Type() MsgType { return TypeDatacenterNodesRequest }
func (*DatacenterNodes) Type() MsgType        { return TypeDatacenterNodes }

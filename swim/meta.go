package swim

import (
	"errors"
	"fmt"

	"github.com/hashicorp/memberlist"

	"tempest/wire"
)

// MaxMetaSize is memberlist's hard limit on node metadata. memberlist panics
// if a delegate hands it more, so NodeMeta is size-checked before it is ever
// installed.
const MaxMetaSize = memberlist.MetaMaxSize

// ErrMetaTooLarge is returned when encoded NodeMeta exceeds MaxMetaSize.
var ErrMetaTooLarge = errors.New("node meta too large")

// NodeMeta is what every member publishes about itself in memberlist's node
// metadata: enough for a peer to know what the node is and where to reach it
// on the data plane, without a round trip.
type NodeMeta struct {
	Role       wire.NodeRole `cbor:"1,keyasint"`
	Datacenter string        `cbor:"2,keyasint,omitempty"`
	// QUICAddr is host:port of the node's data-plane (QUIC) listener; the
	// SWIM address only carries membership traffic.
	QUICAddr string `cbor:"3,keyasint,omitempty"`
	// Tags are small free-form labels (build version, zone). They share the
	// 512-byte budget with everything above.
	Tags map[string]string `cbor:"4,keyasint,omitempty"`
}

// metaWire is NodeMeta as it travels in memberlist. Leaving is set by
// Node.Leave: memberlist knows whether a node left or failed but does not
// tell its event delegate, so the leaving node says so in its metadata
// before it announces the leave.
type metaWire struct {
	NodeMeta
	Leaving bool `cbor:"15,keyasint,omitempty"`
}

// leaveFlagSize is what Leaving adds to an encoding: key 15 and true take a
// byte each, and the map header stays one byte (fewer than 24 entries).
// EncodeNodeMeta reserves it so Leave can never overflow MaxMetaSize.
const leaveFlagSize = 2

// EncodeNodeMeta encodes m for memberlist, failing if it would not fit.
func EncodeNodeMeta(m NodeMeta) ([]byte, error) {
	return encodeMeta(m, false)
}

func encodeMeta(m NodeMeta, leaving bool) ([]byte, error) {
	b, err := wire.Marshal(metaWire{NodeMeta: m, Leaving: leaving})
	if err != nil {
		return nil, fmt.Errorf("encode node meta: %w", err)
	}
	size := len(b)
	if !leaving {
		size += leaveFlagSize
	}
	if size > MaxMetaSize {
		return nil, fmt.Errorf("encode node meta: %d bytes (%d reserved), limit %d: %w",
			size, leaveFlagSize, MaxMetaSize, ErrMetaTooLarge)
	}
	return b, nil
}

// DecodeNodeMeta decodes metadata received from a peer. The bytes are
// untrusted: anything malformed or oversized is an error, never a panic.
func DecodeNodeMeta(b []byte) (NodeMeta, error) {
	m, _, err := decodeMeta(b)
	return m, err
}

func decodeMeta(b []byte) (NodeMeta, bool, error) {
	if len(b) > MaxMetaSize {
		return NodeMeta{}, false, fmt.Errorf("decode node meta: %d bytes, limit %d: %w", len(b), MaxMetaSize, ErrMetaTooLarge)
	}
	if len(b) == 0 {
		// A memberlist node without a delegate publishes nothing; a zero
		// Role says enough.
		return NodeMeta{}, false, nil
	}
	var w metaWire
	if err := wire.Unmarshal(b, &w); err != nil {
		return NodeMeta{}, false, fmt.Errorf("decode node meta: %w", err)
	}
	return w.NodeMeta, w.Leaving, nil
}

// State says whether a node is a member and, if it is gone, how it went.
// memberlist does not report suspicion to its delegates, so a suspect node
// still counts as alive here until its suspicion timer expires.
type State uint8

const (
	StateAlive State = iota
	// StateDead: the suspicion timer expired without refutation; the node
	// failed (crashed, partitioned, or too slow to answer).
	StateDead
	// StateLeft: the node announced a graceful leave (Node.Leave).
	StateLeft
)

func (s State) String() string {
	switch s {
	case StateAlive:
		return "alive"
	case StateDead:
		return "dead"
	case StateLeft:
		return "left"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// NodeInfo is a member as seen by this node.
type NodeInfo struct {
	Name string
	// Addr is the node's SWIM (memberlist) address, host:port. The data
	// plane address is Meta.QUICAddr.
	Addr  string
	Meta  NodeMeta
	State State
}

// Left reports whether the node went away gracefully rather than failing.
func (n NodeInfo) Left() bool { return n.State == StateLeft }

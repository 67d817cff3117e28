package wire

// Content-addressed blobs: files a job references by SHA-256 (data files
// today), stored by every manager of a datacenter. The leader pushes a
// blob's chunks to its peers (BlobChunkPut, then BlobCommit); anyone in the
// cluster may read one back by range (BlobChunkGet) or ask who holds it
// (BlobStat). Sums travel as 32 raw bytes, offsets and sizes as bytes.

// MaxBlobChunk bounds the data of one BlobChunkPut or BlobChunk: well under
// MaxMessageSize, so a chunk never competes with the frame cap, and small
// enough that a chunk in flight costs little memory.
const MaxBlobChunk = 1 << 20

// BlobChunkPut writes Data at Offset of the blob Sum being received. Chunks
// are appended in order; a chunk ending at or before what the receiver
// already holds is a harmless repeat. Answered by BlobAck.
type BlobChunkPut struct {
	Sum    []byte `cbor:"1,keyasint"`
	Offset int64  `cbor:"2,keyasint"`
	Data   []byte `cbor:"3,keyasint"`
}

// BlobCommit asks the receiver to verify the Size bytes it received against
// Sum, make them durable and visible. Answered by BlobAck.
type BlobCommit struct {
	Sum  []byte `cbor:"1,keyasint"`
	Size int64  `cbor:"2,keyasint"`
}

// BlobStat asks whether the receiver holds Sum. Answered by BlobAck.
type BlobStat struct {
	Sum []byte `cbor:"1,keyasint"`
}

// BlobAck says what the sender holds of a blob: Complete with its Size, or
// Have bytes of a partial upload (0: nothing).
type BlobAck struct {
	Sum      []byte `cbor:"1,keyasint"`
	Complete bool   `cbor:"2,keyasint,omitempty"`
	Size     int64  `cbor:"3,keyasint,omitempty"`
	Have     int64  `cbor:"4,keyasint,omitempty"`
}

// BlobChunkGet reads at most Length bytes of a complete blob from Offset.
// Answered by BlobChunk, or a CodeNotFound error.
type BlobChunkGet struct {
	Sum    []byte `cbor:"1,keyasint"`
	Offset int64  `cbor:"2,keyasint"`
	Length int64  `cbor:"3,keyasint"`
}

// BlobChunk is a range of a blob whose whole size is Size; a short Data
// only at the end.
type BlobChunk struct {
	Sum    []byte `cbor:"1,keyasint"`
	Offset int64  `cbor:"2,keyasint"`
	Size   int64  `cbor:"3,keyasint"`
	Data   []byte `cbor:"4,keyasint"`
}

func (*BlobChunkPut) Type() MsgType { return TypeBlobChunkPut }
func (*BlobCommit) Type() MsgType   { return TypeBlobCommit }
func (*BlobStat) Type() MsgType     { return TypeBlobStat }
func (*BlobAck) Type() MsgType      { return TypeBlobAck }
func (*BlobChunkGet) Type() MsgType { return TypeBlobChunkGet }
func (*BlobChunk) Type() MsgType    { return TypeBlobChunk }

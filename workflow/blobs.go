package workflow

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"tempest/wire"
)

// Blobs: a data file uploaded to the cluster before the job (tempest submit
// does this) is stored by the managers under its SHA-256, and the params
// carry that name instead of the text. Every shard and every retry of the
// workflow then shares the one stored copy, so no message grows with the
// file, and the worker reads the blob by range before it runs.

// BlobReferrer is implemented by types whose params can reference blobs.
type BlobReferrer interface {
	// Blobs lists the blobs (hex SHA-256) params reference.
	Blobs(params []byte) ([]string, error)
	// DetachBlobs drops the text of every data file that also names a
	// blob, once the parser has checked it.
	DetachBlobs(params []byte) ([]byte, error)
	// AttachBlobs fills in the text of every data file named by a blob,
	// read through read (which verifies the content against the sum).
	AttachBlobs(params []byte, read func(sum string) ([]byte, error)) ([]byte, error)
}

// checkBlobSum checks a hex SHA-256 as params carry it.
func checkBlobSum(s string) error {
	if len(s) != 2*sha256.Size {
		return fmt.Errorf("blob name %q is not a SHA-256 (%d hex digits)", truncate(s, 80), 2*sha256.Size)
	}
	if _, err := hex.DecodeString(s); err != nil {
		return fmt.Errorf("blob name %q is not hex", truncate(s, 80))
	}
	return nil
}

// ErrBlobMismatch is returned (wrapped) when a blob's bytes do not hash to
// its name.
var ErrBlobMismatch = errors.New("blob content does not match its SHA-256")

// VerifyBlob checks b against the hex sum it was read under.
func VerifyBlob(sum string, b []byte) error {
	got := sha256.Sum256(b)
	if hex.EncodeToString(got[:]) != sum {
		return fmt.Errorf("blob %s: %w", truncate(sum, 80), ErrBlobMismatch)
	}
	return nil
}

// Blobs implements BlobReferrer.
func (HTTPType) Blobs(params []byte) ([]string, error) {
	p, err := decodeHTTPLoose(params)
	if err != nil || p.Data == nil || p.Data.Blob == "" {
		return nil, err
	}
	return []string{p.Data.Blob}, nil
}

// DetachBlobs implements BlobReferrer.
func (HTTPType) DetachBlobs(params []byte) ([]byte, error) {
	p, err := decodeHTTPLoose(params)
	if err != nil || p.Data == nil || p.Data.Blob == "" || p.Data.CSV == "" {
		return params, err
	}
	p.Data.CSV = ""
	return wire.Marshal(p)
}

// AttachBlobs implements BlobReferrer.
func (HTTPType) AttachBlobs(params []byte, read func(sum string) ([]byte, error)) ([]byte, error) {
	p, err := decodeHTTPLoose(params)
	if err != nil || p.Data == nil || p.Data.Blob == "" || p.Data.CSV != "" {
		return params, err
	}
	b, err := read(p.Data.Blob)
	if err != nil {
		return nil, fmt.Errorf("data file %q: %w", p.Data.File, err)
	}
	if err := VerifyBlob(p.Data.Blob, b); err != nil {
		return nil, fmt.Errorf("data file %q: %w", p.Data.File, err)
	}
	if len(b) > MaxDataSize {
		return nil, fmt.Errorf("data file %q is %d bytes, more than the %d allowed", p.Data.File, len(b), MaxDataSize)
	}
	p.Data.CSV = string(b)
	return wire.Marshal(p)
}

// decodeHTTPLoose decodes params without validating them: they may be in
// the middle of a detach or attach.
func decodeHTTPLoose(params []byte) (*HTTPParams, error) {
	if len(params) > MaxParamsSize {
		return nil, fmt.Errorf("params are %d bytes, more than %d", len(params), MaxParamsSize)
	}
	var p HTTPParams
	if err := wire.Unmarshal(params, &p); err != nil {
		return nil, fmt.Errorf("decode params: %w", err)
	}
	return &p, nil
}

// SpecBlobs lists the blobs a workflow spec references (none for a type
// that cannot reference any, or unknown types).
func (r *Registry) SpecBlobs(spec wire.WorkflowSpec) ([]string, error) {
	t, ok := r.Lookup(spec.Type)
	if !ok {
		return nil, nil
	}
	br, ok := t.(BlobReferrer)
	if !ok {
		return nil, nil
	}
	return br.Blobs(spec.Params)
}

// AttachSpecBlobs returns spec with its blobs' content filled in.
func (r *Registry) AttachSpecBlobs(spec wire.WorkflowSpec, read func(sum string) ([]byte, error)) (wire.WorkflowSpec, error) {
	t, ok := r.Lookup(spec.Type)
	if !ok {
		return spec, nil
	}
	br, ok := t.(BlobReferrer)
	if !ok {
		return spec, nil
	}
	params, err := br.AttachBlobs(spec.Params, read)
	if err != nil {
		return spec, err
	}
	spec.Params = params
	return spec, nil
}

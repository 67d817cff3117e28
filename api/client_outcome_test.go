package api_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"tempest/api"
	"tempest/api/apitest"
	"tempest/wire"
)

// unsureBackend answers the first fails submissions with outcome_unknown,
// as a gate does when it could neither store a job on a majority nor
// withdraw it, and records the job id each one named.
type unsureBackend struct {
	*apitest.Backend
	mu    sync.Mutex
	fails int
	ids   []string
}

func (b *unsureBackend) Submit(ctx context.Context, sub *wire.JobSubmission) (*wire.JobAck, error) {
	b.mu.Lock()
	b.ids = append(b.ids, sub.JobID)
	fail := len(b.ids) <= b.fails
	b.mu.Unlock()
	if fail {
		return nil, wire.Errorf(wire.CodeOutcomeUnknown, "reached 1 of 3 gates")
	}
	return b.Backend.Submit(ctx, sub)
}

// A submission whose outcome the cluster cannot tell is re-sent under the
// same key (so never as a second job) until it can; if it never can, the
// error says the job may still run and how to find it.
func TestSubmitResendsAnUnknownOutcomeUnderTheSameKey(t *testing.T) {
	b := &unsureBackend{Backend: apitest.NewBackend(), fails: 2}
	srv := apitest.Serve(t, b, nil)
	c := newClient(t, srv.URL())
	if _, err := c.Submit(context.Background(), []byte(goodJob), "x.yaml"); err != nil {
		t.Fatalf("submit: %v", err)
	}
	b.mu.Lock()
	ids := b.ids
	b.mu.Unlock()
	if len(ids) != 3 || ids[0] == "" || ids[1] != ids[0] || ids[2] != ids[0] {
		t.Fatalf("attempts named %q: want three, all the same job", ids)
	}

	b.mu.Lock()
	b.ids, b.fails = nil, 100
	b.mu.Unlock()
	_, err := c.Submit(context.Background(), []byte(goodJob), "x.yaml")
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.Code != api.CodeOutcomeUnknown || apiErr.Status != 503 {
		t.Fatalf("persistent unknown outcome: %#v", err)
	}
	b.mu.Lock()
	id := b.ids[0]
	b.mu.Unlock()
	for _, want := range []string{"may still run", "tempest status " + id, "second job"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

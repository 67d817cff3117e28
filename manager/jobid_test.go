package manager

import (
	"context"
	"testing"
	"time"

	"tempest/api"
	"tempest/api/apitest"
	"tempest/wire"
)

// A job id the submit path accepts is one the API can read back: the ids
// the product makes (the snowflake's, an idempotency key's) and what
// clients and tests submit pass both; anything the API's path could never
// name (a '#', a '/', a letter outside ASCII) is refused at intake, with
// the typed refusal an invalid job gets, instead of stored unreadable.
func TestSubmittedJobIDReadsBack(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	c.addWorker("w1", 4)
	l := c.leader()
	srv := apitest.Serve(t, l, nil)
	client, err := api.NewClient([]string{srv.URL()}, apitest.Token)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id     string
		accept bool
	}{
		{"j-00000000000000ff", true}, // jobs.NewID
		{"j-Idem_Key-0001", true},    // an idempotency key's id
		{"job-1", true},
		{"run:2026.11_a", true},
		{"job#1", false},
		{"job/1", false},
		{"job?x=1", false},
		{"jöb", false},
		{"job%41", false},
	} {
		t.Run(tc.id, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			sub := sleepJob(t, "odd", 1, 1, time.Millisecond)
			sub.JobID = tc.id
			ack, err := l.Submit(ctx, sub)
			if !tc.accept {
				if wire.CodeOf(err) != wire.CodeRejected {
					t.Fatalf("submit %q: %+v, %v; want it refused as an invalid job", tc.id, ack, err)
				}
				return
			}
			if err != nil || !ack.Accepted {
				t.Fatalf("submit %q: %+v, %v", tc.id, ack, err)
			}
			st, err := client.Job(ctx, tc.id)
			if err != nil {
				t.Fatalf("read back %q through the API: %v", tc.id, err)
			}
			if st.JobID != tc.id {
				t.Fatalf("read back %q, got %q", tc.id, st.JobID)
			}
		})
	}
}

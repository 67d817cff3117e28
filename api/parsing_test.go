package api_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tempest/api"
	"tempest/api/apitest"
	"tempest/internal/testutil"
	"tempest/wire"
	"tempest/workflow"
)

// gateType is a workflow type whose params parse only when the test lets
// them, counting how many parses run at once.
type gateType struct {
	open          chan struct{}
	running, peak atomic.Int32
}

func (g *gateType) Name() string { return "gated" }
func (g *gateType) ParseParams(f *workflow.Fields) []byte {
	n := g.running.Add(1)
	for {
		p := g.peak.Load()
		if n <= p || g.peak.CompareAndSwap(p, n) {
			break
		}
	}
	<-g.open
	g.running.Add(-1)
	return f.Encode(gatedParams{})
}

type gatedParams struct{}

func (gatedParams) Validate() error                                { return nil }
func (g *gateType) DecodeParams([]byte) (workflow.Params, error)   { return gatedParams{}, nil }
func (g *gateType) New(wire.WorkflowSpec) (workflow.Runner, error) { return nil, fmt.Errorf("not run") }

// Job bodies are parsed at most MaxParsing at a time: the others wait
// their turn, and all of them go through once the parses end.
func TestJobParsingRunsUnderAConcurrencyBound(t *testing.T) {
	gt := &gateType{open: make(chan struct{})}
	reg := workflow.DefaultRegistry()
	if err := reg.Register(gt); err != nil {
		t.Fatal(err)
	}
	srv := apitest.Serve(t, apitest.NewBackend(), func(c *api.ServerConfig) {
		c.Registry = reg
		c.MaxParsing = 2
	})
	rc := newRawClient(t)
	const clients = 8
	var wg sync.WaitGroup
	statuses := make(chan int, clients)
	for i := range clients {
		wg.Go(func() {
			body := fmt.Sprintf("name: j%d\nworkflows:\n  - name: w\n    type: gated\n", i)
			resp, _ := rc.do("POST", srv.URL()+"/v1/jobs", []byte(body), map[string]string{"Authorization": "Bearer " + apitest.Token})
			statuses <- resp.StatusCode
		})
	}
	testutil.Eventually(t, 30*time.Second, 5*time.Millisecond, func() error {
		if n := gt.running.Load(); n != 2 {
			return fmt.Errorf("%d parses running, want the bound, 2", n)
		}
		return nil
	})
	close(gt.open)
	wg.Wait()
	close(statuses)
	for s := range statuses {
		if s != 201 {
			t.Errorf("a submission that waited its turn: status %d, want 201", s)
		}
	}
	if p := gt.peak.Load(); p != 2 {
		t.Fatalf("at most %d parses ran at once, want 2", p)
	}
}

package workflow

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"tempest/wire"
)

func TestRestRunsWhatIsLeft(t *testing.T) {
	steps := []HTTPStep{{Name: "get", Method: "GET", URL: "http://target.test/"}}
	for _, tc := range []struct {
		name     string
		params   HTTPParams
		done     Done
		want     *HTTPParams // nil: nothing left
		wantLeft bool
	}{
		{"iterations", HTTPParams{VUs: 4, Iterations: 1000}, Done{Elapsed: time.Second, Iterations: 388},
			&HTTPParams{VUs: 4, Iterations: 612}, true},
		{"iterations all done", HTTPParams{VUs: 4, Iterations: 1000}, Done{Iterations: 1000}, nil, false},
		{"duration", HTTPParams{VUs: 2, Duration: 30 * time.Second}, Done{Elapsed: 12 * time.Second, Iterations: 5},
			&HTTPParams{VUs: 2, Duration: 18 * time.Second}, true},
		{"duration over", HTTPParams{VUs: 2, Duration: 30 * time.Second}, Done{Elapsed: 31 * time.Second}, nil, false},
		{"open model", HTTPParams{Model: OpenModel, Rate: 100, Duration: 10 * time.Second}, Done{Elapsed: 4 * time.Second},
			&HTTPParams{Model: OpenModel, Rate: 100, Duration: 6 * time.Second}, true},
		{"mid stage", HTTPParams{VUs: 0, Stages: []Stage{{10 * time.Second, 10}, {10 * time.Second, 0}}}, Done{Elapsed: 15 * time.Second},
			&HTTPParams{VUs: 5, Stages: []Stage{{5 * time.Second, 0}}}, true},
		{"open ramp into the hold", HTTPParams{Model: OpenModel, Rate: 10, Duration: 20 * time.Second, Stages: []Stage{{10 * time.Second, 50}}},
			Done{Elapsed: 12 * time.Second}, &HTTPParams{Model: OpenModel, Rate: 50, Duration: 8 * time.Second}, true},
		{"ramp over", HTTPParams{VUs: 1, Stages: []Stage{{10 * time.Second, 10}}}, Done{Elapsed: 10 * time.Second}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.params
			p.Steps = steps
			b, err := wire.Marshal(&p)
			if err != nil {
				t.Fatal(err)
			}
			rest, left, err := HTTPType{}.Rest(b, tc.done)
			if err != nil {
				t.Fatal(err)
			}
			if left != tc.wantLeft {
				t.Fatalf("left = %v, want %v", left, tc.wantLeft)
			}
			if !left {
				return
			}
			got, err := HTTPType{}.DecodeParams(rest)
			if err != nil {
				t.Fatal(err)
			}
			g := got.(*HTTPParams)
			w := tc.want
			if g.VUs != w.VUs || g.Iterations != w.Iterations || g.Duration != w.Duration || g.Rate != w.Rate || len(g.Stages) != len(w.Stages) {
				t.Fatalf("rest = vus %d iterations %d duration %s rate %v stages %v, want vus %d iterations %d duration %s rate %v stages %v",
					g.VUs, g.Iterations, g.Duration, g.Rate, g.Stages, w.VUs, w.Iterations, w.Duration, w.Rate, w.Stages)
			}
			for i := range w.Stages {
				if g.Stages[i] != w.Stages[i] {
					t.Fatalf("stage %d = %+v, want %+v", i, g.Stages[i], w.Stages[i])
				}
			}
		})
	}
}

func TestRestRefusesNegativeProgress(t *testing.T) {
	b, err := wire.Marshal(&HTTPParams{VUs: 1, Iterations: 10, Steps: []HTTPStep{{Name: "get", Method: "GET", URL: "http://target.test/"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := (HTTPType{}).Rest(b, Done{Iterations: -1}); err == nil {
		t.Fatal("negative progress accepted")
	}
}

// Iterations counts passes that ran to their end, so a retry's budget
// leaves out exactly those.
func TestSnapshotCountsIterations(t *testing.T) {
	tgt := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(tgt.Close)
	p := &HTTPParams{VUs: 3, Iterations: 31, Steps: []HTTPStep{
		{Name: "a", Method: "GET", URL: tgt.URL + "/a"}, {Name: "b", Method: "GET", URL: tgt.URL + "/b"}}}
	b, err := wire.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	r, err := HTTPType{}.New(wire.WorkflowSpec{Name: "it", Type: "http", Cores: 1, Params: b})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(t.Context(), Env{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Iterations != 31 || res.Completed != 62 {
		t.Fatalf("iterations %d, completed %d; want 31 and 62", res.Iterations, res.Completed)
	}
}

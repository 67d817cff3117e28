package obs_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tempest/internal/obs"
	"tempest/internal/obs/obstest"
	"tempest/transport"
)

// obs.Role publishes the series a gate and a manager share under the role's
// prefix and words, the role's own series beside them, and the live job
// series its Live gives (nothing while it follows: a follower's numbers would
// be stale).
func TestRole(t *testing.T) {
	for _, tc := range []struct {
		name    string
		role    string
		leads   string
		state   obs.RoleState
		live    []obs.JobSeries
		want    []string
		notWant []string
	}{
		{"a leading gate", "gate", "the gates",
			obs.RoleState{Leading: true, Term: 7, Jobs: map[string]float64{"RUNNING": 2, "COMPLETED": 1}},
			[]obs.JobSeries{{JobID: "j1", Completed: 3}},
			[]string{"# HELP tempest_gate_is_leader 1 if this gate leads the gates.\n", "tempest_gate_is_leader 1\n",
				"# HELP tempest_gate_term Election term this gate is in.\n", "tempest_gate_term 7\n",
				"# HELP tempest_gate_jobs Jobs known to this gate by status.\n", `tempest_gate_jobs{status="RUNNING"} 2` + "\n",
				`tempest_gate_jobs{status="COMPLETED"} 1` + "\n", `job_id="j1"`, "tempest_gate_own 1\n"}, nil},
		{"a following manager", "manager", "its datacenter",
			obs.RoleState{Term: 3, Jobs: map[string]float64{"RUNNING": 1}}, nil,
			[]string{"# HELP tempest_manager_is_leader 1 if this manager leads its datacenter.\n", "tempest_manager_is_leader 0\n",
				"tempest_manager_term 3\n", `tempest_manager_jobs{status="RUNNING"} 1` + "\n", "tempest_manager_own 1\n"},
			[]string{`job_id="j1"`}},
		{"a leader with nothing running", "gate", "the gates", obs.RoleState{Leading: true}, nil,
			[]string{"tempest_gate_is_leader 1\n", "tempest_gate_term 0\n"}, []string{"tempest_gate_jobs{", "job_id="}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			own := prometheus.NewDesc("tempest_"+tc.role+"_own", "A series of the role's own.", nil, nil)
			role := obs.Role{Name: tc.role, Leads: tc.leads, Own: []*prometheus.Desc{own},
				Transport: func() transport.Transport { return nil },
				Scrape: func(ch chan<- prometheus.Metric) obs.RoleState {
					obs.Gauge(ch, own, 1)
					return tc.state
				},
				Live: func() []obs.JobSeries { return tc.live }}
			text := obstest.Registered(t, tc.role, 10*time.Second, role.Register, tc.want...)
			for _, no := range tc.notWant {
				if strings.Contains(text, no) {
					t.Errorf("metrics show %q:\n%s", no, text)
				}
			}
		})
	}
}

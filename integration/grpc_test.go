package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	hwpb "google.golang.org/grpc/examples/helloworld/helloworld"

	"tempest/wire"
)

// countingGreeter is grpc's helloworld example server (greeter_server),
// counting the calls it answers.
type countingGreeter struct {
	hwpb.UnimplementedGreeterServer
	calls atomic.Int64
}

func (g *countingGreeter) SayHello(_ context.Context, in *hwpb.HelloRequest) (*hwpb.HelloReply, error) {
	g.calls.Add(1)
	return &hwpb.HelloReply{Message: "Hello " + in.GetName()}, nil
}

// A grpc job submitted by the real CLI, its .proto file read beside the job
// file and carried to the worker: every call counted once on both sides,
// under status 0, with a check on the reply.
func TestGRPCJobAgainstGreeter(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, g := grpc.NewServer(), &countingGreeter{}
	hwpb.RegisterGreeterServer(srv, g)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)

	c := startCluster(t, 1, 1, 1)
	dir := t.TempDir()
	proto, err := os.ReadFile("../workflow/testdata/grpc/helloworld.proto")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "helloworld.proto"), proto, 0o600); err != nil {
		t.Fatal(err)
	}
	job := fmt.Sprintf(`name: greet
timeout: 60s
workflows:
  - name: hello
    type: grpc
    proto: helloworld.proto
    cores: 1
    vus: 4
    iterations: 400
    steps:
      - name: say
        url: grpc://%s/helloworld.Greeter/SayHello
        body: '{"name": "vu{{vu}}"}'
        checks:
          - {name: greets, json: message, matches: '^Hello vu[0-9]+$'}
`, ln.Addr())
	jobPath := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(jobPath, []byte(job), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, "tempest"), "submit", jobPath)
	cmd.Env = append(c.Env(), "TEMPEST_API="+strings.Join(c.APIs(), ","))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tempest submit: %v\n%s", err, out)
	}
	id := strings.TrimSpace(string(out))
	st := c.waitStatus(id, 45*time.Second, terminal)
	if st.Status != wire.JobCompleted {
		t.Fatalf("job ended %s: %s", st.Status, st.Error)
	}
	wf := st.Workflows[0]
	if got := g.calls.Load(); got != 400 || wf.CompletedCount != 400 || wf.FailedCount != 0 {
		t.Fatalf("the greeter answered %d calls; the job counted %d completed, %d failed; want 400 each", got, wf.CompletedCount, wf.FailedCount)
	}
	step := wf.Steps[0]
	if step.Statuses["0"] != 400 || len(step.Checks) != 1 || step.Checks[0].Passed != 400 {
		t.Fatalf("step %s: statuses %v, checks %+v", step.Name, step.Statuses, step.Checks)
	}
}

package workflow

import (
	"context"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	hwpb "google.golang.org/grpc/examples/helloworld/helloworld"
	rgpb "google.golang.org/grpc/examples/route_guide/routeguide"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"tempest/wire"
)

// greeter is the server of grpc's helloworld example (greeter_server),
// counting the calls it answers and refusing names that start with "bad".
type greeter struct {
	hwpb.UnimplementedGreeterServer
	calls   atomic.Int64
	refused atomic.Int64
}

func (g *greeter) SayHello(ctx context.Context, in *hwpb.HelloRequest) (*hwpb.HelloReply, error) {
	g.calls.Add(1)
	if strings.HasPrefix(in.GetName(), "bad") {
		g.refused.Add(1)
		return nil, status.Error(codes.InvalidArgument, "bad name")
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get("x-tenant")) > 0 {
		grpc.SetHeader(ctx, metadata.Pairs("x-tenant-seen", md.Get("x-tenant")[0]))
	}
	return &hwpb.HelloReply{Message: "Hello " + in.GetName()}, nil
}

// routeGuide serves route_guide's server-streaming ListFeatures as its
// example server does, over three saved features.
type routeGuide struct {
	rgpb.UnimplementedRouteGuideServer
	calls atomic.Int64
}

func (r *routeGuide) ListFeatures(rect *rgpb.Rectangle, stream rgpb.RouteGuide_ListFeaturesServer) error {
	r.calls.Add(1)
	for i := range int32(3) {
		f := &rgpb.Feature{Name: "feature", Location: &rgpb.Point{Latitude: rect.GetLo().GetLatitude() + i}}
		if err := stream.Send(f); err != nil {
			return err
		}
	}
	return nil
}

func startGRPC(t *testing.T) (string, *greeter, *routeGuide) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	g, rg := &greeter{}, &routeGuide{}
	hwpb.RegisterGreeterServer(s, g)
	rgpb.RegisterRouteGuideServer(s, rg)
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return ln.Addr().String(), g, rg
}

func readProto(t *testing.T, name string) *GRPC {
	t.Helper()
	b, err := os.ReadFile("testdata/grpc/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return &GRPC{ProtoName: name, Proto: b}
}

func runGRPC(t *testing.T, p *HTTPParams) Result {
	t.Helper()
	b, err := wire.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	r, err := GRPCType{}.New(wire.WorkflowSpec{Name: "grpc", Type: GRPCTypeName, Cores: 1, Params: b})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(t.Context(), Env{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// Unary calls of the helloworld greeter: every call counted once on both
// sides, the status code as the step's status, a capture from the JSON
// reply used in the next call's message, checks on the reply and on the
// response metadata, and a refused call counted under status 3.
func TestGRPCGreeterExactCounts(t *testing.T) {
	addr, g, _ := startGRPC(t)
	url := "grpc://" + addr + "/helloworld.Greeter/SayHello"
	p := &HTTPParams{VUs: 3, Iterations: 60, Protocol: ProtocolGRPC, GRPC: readProto(t, "helloworld.proto"),
		Steps: []HTTPStep{
			{Name: "hello", URL: url, Body: `{"name": "vu{{vu}}"}`, Headers: map[string]string{"x-tenant": "t1"},
				Captures: []HTTPCapture{{Name: "greeting", Source: CaptureJSON, Expr: "message"}},
				Checks: []HTTPCheck{{Name: "greets", Kind: CheckJSON, Path: "message", Op: OpMatches, Value: "^Hello vu[0-9]+$"},
					{Name: "tenant", Kind: CheckHeader, Path: "x-tenant-seen", Op: OpMatches, Value: "^t1$"}}},
			{Name: "again", URL: url, Body: `{"name": "{{greeting}}"}`,
				Checks: []HTTPCheck{{Name: "ok", Kind: CheckStatus, Statuses: []int{0}}}},
			{Name: "refused", URL: url, Body: `{"name": "bad"}`, ExpectStatus: []int{int(codes.InvalidArgument)}},
		}}
	res := runGRPC(t, p)
	if got := g.calls.Load(); got != 180 || res.Completed != 180 || res.Failed != 0 {
		t.Fatalf("greeter answered %d calls; the run counted %d completed, %d failed; want 180 and 180, 0", got, res.Completed, res.Failed)
	}
	hello, refused := stepNamed(t, res, "hello"), stepNamed(t, res, "refused")
	if hello.Statuses[0] != 60 || refused.Statuses[int(codes.InvalidArgument)] != 60 || g.refused.Load() != 60 {
		t.Fatalf("statuses: hello %v, refused %v", hello.Statuses, refused.Statuses)
	}
	if c := checkCounts(hello); c["greets"] != [2]int64{60, 0} || c["tenant"] != [2]int64{60, 0} {
		t.Fatalf("hello's checks %v", c)
	}
	if c := checkCounts(stepNamed(t, res, "again")); c["ok"] != [2]int64{60, 0} {
		t.Fatalf("again's checks %v", c)
	}
	if hello.Latency.Count() != 60 {
		t.Fatalf("hello's histogram holds %d samples", hello.Latency.Count())
	}
}

// A server-streaming call is one request whose body is the JSON array of
// the messages received.
func TestGRPCServerStreaming(t *testing.T) {
	addr, _, rg := startGRPC(t)
	p := &HTTPParams{VUs: 2, Iterations: 10, Protocol: ProtocolGRPC, GRPC: readProto(t, "route_guide.proto"),
		Steps: []HTTPStep{{Name: "list", URL: "grpc://" + addr + "/routeguide.RouteGuide/ListFeatures",
			Body: `{"lo": {"latitude": 7}, "hi": {"latitude": 9}}`,
			Checks: []HTTPCheck{{Name: "three", Kind: CheckJSON, Path: "#", Op: OpEquals, Value: "3"},
				{Name: "first", Kind: CheckJSON, Path: "0.location.latitude", Op: OpEquals, Value: "7"}}}}}
	res := runGRPC(t, p)
	if got := rg.calls.Load(); got != 10 || res.Completed != 10 {
		t.Fatalf("route guide answered %d calls, the run counted %d", got, res.Completed)
	}
	if c := checkCounts(stepNamed(t, res, "list")); c["three"] != [2]int64{10, 0} || c["first"] != [2]int64{10, 0} {
		t.Fatalf("checks %v", c)
	}
}

func TestGRPCValidate(t *testing.T) {
	hello := readProto(t, "helloworld.proto")
	for _, tc := range []struct {
		name string
		p    HTTPParams
		want string
	}{
		{"no proto", HTTPParams{Steps: []HTTPStep{{Name: "a", URL: "grpc://h:1/helloworld.Greeter/SayHello"}}}, "proto: is required"},
		{"bad proto", HTTPParams{GRPC: &GRPC{ProtoName: "x.proto", Proto: []byte("syntax = \"proto3\";\nmessage {")},
			Steps: []HTTPStep{{Name: "a", URL: "grpc://h:1/x.Y/Z"}}}, "proto: x.proto does not compile: x.proto:2:9"},
		{"unknown method", HTTPParams{GRPC: hello, Steps: []HTTPStep{{Name: "a", URL: "grpc://h:1/helloworld.Greeter/SayHi"}}},
			`steps[0].url: method "helloworld.Greeter/SayHi" is not in the .proto file (methods: helloworld.Greeter/SayHello)`},
		{"not a grpc url", HTTPParams{GRPC: hello, Steps: []HTTPStep{{Name: "a", URL: "http://h:1/helloworld.Greeter/SayHello"}}},
			"steps[0].url: must be a grpc://host:port/package.Service/Method URL"},
		{"bad message", HTTPParams{GRPC: hello, Steps: []HTTPStep{{Name: "a", URL: "grpc://h:1/helloworld.Greeter/SayHello", Body: `{"nme": "x"}`}}},
			"steps[0].body: is not a helloworld.HelloRequest in JSON"},
		{"http status", HTTPParams{GRPC: hello, Steps: []HTTPStep{{Name: "a", URL: "grpc://h:1/helloworld.Greeter/SayHello", ExpectStatus: []int{200}}}},
			"steps[0].expect_status[0]: must be a gRPC status code between 0 (OK) and 16, got 200"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p
			p.VUs, p.Iterations, p.Protocol = 1, 1, ProtocolGRPC
			err := p.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
	rg := readProto(t, "route_guide.proto")
	p := HTTPParams{VUs: 1, Iterations: 1, Protocol: ProtocolGRPC, GRPC: rg,
		Steps: []HTTPStep{{Name: "a", URL: "grpc://h:1/routeguide.RouteGuide/RecordRoute"}}}
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "streams from the client") {
		t.Fatalf("client streaming: %v", err)
	}
}

package jobfile

import (
	"errors"
	"os"
	"strings"
	"testing"

	"tempest/wire"
	"tempest/workflow"
)

func grpcJob(proto, url, extra string) string {
	return `name: greet
workflows:
  - name: hello
    type: grpc
    proto: ` + proto + `
    vus: 2
    iterations: 10
    steps:
      - name: say
        url: ` + url + `
        body: '{"name": "vu{{vu}}"}'
` + extra
}

func parseGRPC(t *testing.T, src string) (*wire.JobSubmission, error) {
	t.Helper()
	hello, err := os.ReadFile("../../workflow/testdata/grpc/helloworld.proto")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"helloworld.proto": hello, "broken.proto": []byte("syntax = \"proto3\";\nservice S {\n  rpc M (In) returns (Out);\n}\n")}
	read := func(name string) ([]byte, error) {
		if b, ok := files[name]; ok {
			return b, nil
		}
		return nil, os.ErrNotExist
	}
	return Parse([]byte(src), "grpc.yaml", workflow.DefaultRegistry(), WithTLSFiles(read))
}

// A grpc workflow parses with its .proto file carried in the params; misuse
// is refused at the job file's line.
func TestGRPCJob(t *testing.T) {
	sub, err := parseGRPC(t, grpcJob("helloworld.proto", "grpc://127.0.0.1:50051/helloworld.Greeter/SayHello", ""))
	if err != nil {
		t.Fatal(err)
	}
	if w := sub.Workflows[0]; w.Type != "grpc" {
		t.Fatalf("type %q", w.Type)
	}
	for _, tt := range []struct{ src, want string }{
		{grpcJob("broken.proto", "grpc://h:1/S/M", ""), `grpc.yaml:5: workflows[0].proto: broken.proto does not compile: broken.proto:3:10: method S.M: unknown request type In`},
		{grpcJob("missing.proto", "grpc://h:1/S/M", ""), "grpc.yaml:5: workflows[0].proto: cannot read a .proto file: file does not exist"},
		{grpcJob("helloworld.proto", "grpc://h:1/helloworld.Greeter/SayHi", ""),
			`grpc.yaml:10: workflows[0].steps[0].url: method "helloworld.Greeter/SayHi" is not in the .proto file (methods: helloworld.Greeter/SayHello)`},
		{grpcJob("helloworld.proto", "http://h:1/helloworld.Greeter/SayHello", ""), "grpc.yaml:10: workflows[0].steps[0].url: must be a grpc://host:port/package.Service/Method URL"},
		{grpcJob("helloworld.proto", "grpc://h:1/helloworld.Greeter/SayHello", "        expect_status: [200]\n"),
			"grpc.yaml:12: workflows[0].steps[0].expect_status[0]: must be a gRPC status code between 0 (OK) and 16, got 200"},
		{grpcJob("helloworld.proto", "grpc://h:1/helloworld.Greeter/SayHello", "    redirects: 3\n"), `workflows[0]: unknown key "redirects"`},
	} {
		_, err := parseGRPC(t, tt.src)
		var jfe *Error
		if !errors.As(err, &jfe) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("err = %v, want %q", err, tt.want)
		}
	}
	if _, err := parseGRPC(t, strings.Replace(grpcJob("helloworld.proto", "grpc://h:1/helloworld.Greeter/SayHello", ""), "    proto: helloworld.proto\n", "", 1)); err == nil || !strings.Contains(err.Error(), "proto") {
		t.Errorf("no proto: %v", err)
	}
}

// A websocket workflow reads send, expect and hold per step; misuse is
// refused at its line.
func TestWebSocketJob(t *testing.T) {
	job := func(step string) string {
		return "name: chat\nworkflows:\n  - name: echo\n    type: websocket\n    vus: 2\n    iterations: 10\n    steps:\n" + step
	}
	sub, err := Parse([]byte(job("      - {name: hi, url: \"ws://h:1/echo\", send: hello, expect: {match: '^hello$', count: 1, timeout: 2s}, hold: 1s}\n")),
		"ws.yaml", workflow.DefaultRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if sub.Workflows[0].Type != "websocket" {
		t.Fatalf("type %q", sub.Workflows[0].Type)
	}
	for _, tt := range []struct{ step, want string }{
		{"      - {name: hi, url: \"http://h:1/\", send: x}\n", "ws.yaml:8: workflows[0].steps[0].url: must be a ws:// or wss:// URL"},
		{"      - {name: hi, url: \"ws://h:1/\", send: x, expect: {match: '('}}\n", "ws.yaml:8: workflows[0].steps[0].expect.match: must be a regular expression"},
		{"      - {name: hi, url: \"ws://h:1/\", send: x, expect: {count: 0}}\n", "ws.yaml:8: workflows[0].steps[0].expect.count: must be between 1 and 10000, got 0"},
		{"      - {name: hi, url: \"ws://h:1/\"}\n", "ws.yaml:8: workflows[0].steps[0]: a websocket step needs send, expect or hold"},
		{"      - {name: hi, url: \"ws://h:1/\", body: x}\n", `ws.yaml:8: workflows[0].steps[0]: unknown key "body"`},
	} {
		_, err := Parse([]byte(job(tt.step)), "ws.yaml", workflow.DefaultRegistry())
		var jfe *Error
		if !errors.As(err, &jfe) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %q", strings.TrimSpace(tt.step), err, tt.want)
		}
	}
}

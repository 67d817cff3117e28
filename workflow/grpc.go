package workflow

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/bufbuild/protocompile"
	protoreporter "github.com/bufbuild/protocompile/reporter"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// GRPCType is the grpc workflow type: the http type's load models,
// histograms, checks, captures and thresholds, with each step a gRPC call
// described by a .proto file uploaded with the job. A step's url is
// grpc://host:port/package.Service/Method (grpcs:// over TLS, with the
// workflow's tls: and insecure_skip_verify), its body the request message
// in JSON (templated like any body), its headers the call's metadata. Its
// status is the call's gRPC status code (0 is OK, the default expectation);
// its body, for captures and checks, the response in JSON — for a
// server-streaming call, a JSON array of the messages received.
type GRPCType struct{ HTTPType }

// GRPCTypeName is the job file's type: value.
const GRPCTypeName = "grpc"

// Name implements Type.
func (GRPCType) Name() string { return GRPCTypeName }

// GRPC is a grpc workflow's service description: the .proto file, by the
// name the job file gives, and its text.
type GRPC struct {
	ProtoName string `cbor:"1,keyasint"`
	Proto     []byte `cbor:"2,keyasint"`
}

// MaxProtoFile bounds the .proto file a grpc workflow carries in its
// params.
const MaxProtoFile = MaxTLSFile

// ParseParams implements Type: the http type's keys but protocol, cookies,
// redirects and connection_reuse, which gRPC does not have (they are
// refused as unknown keys), and proto: the service's .proto file.
func (GRPCType) ParseParams(f *Fields) []byte {
	p := parseLoad(f)
	p.Protocol = ProtocolGRPC
	f.Required("proto")
	if name, ok := f.String("proto"); ok {
		if b, ok := f.smallFile("proto", name, "a .proto file", MaxProtoFile); ok {
			p.GRPC = &GRPC{ProtoName: name, Proto: b}
		}
	}
	p.InsecureSkipVerify, _ = f.Bool("insecure_skip_verify")
	p.TLS = parseTLS(f)
	parseRequests(f, &p)
	return f.Encode(&p)
}

// grpcService is a compiled .proto file.
type grpcService struct {
	files   []protoreflect.FileDescriptor
	methods map[string]protoreflect.MethodDescriptor // "package.Service/Method"
}

// compileProto parses and links a .proto file alone (its imports may be
// the well-known types only).
func compileProto(name string, src []byte) (*grpcService, error) {
	var problems []string
	c := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			Accessor: protocompile.SourceAccessorFromMap(map[string]string{name: string(src)}),
		}),
		Reporter: protoreporter.NewReporter(func(err protoreporter.ErrorWithPos) error {
			problems = append(problems, err.Error())
			return nil
		}, nil),
	}
	files, err := c.Compile(context.Background(), name)
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems[:min(len(problems), 3)], "; "))
	}
	if err != nil {
		return nil, err
	}
	s := &grpcService{methods: map[string]protoreflect.MethodDescriptor{}}
	for _, f := range files {
		s.files = append(s.files, f)
		svcs := f.Services()
		for i := range svcs.Len() {
			ms := svcs.Get(i).Methods()
			for j := range ms.Len() {
				m := ms.Get(j)
				s.methods[string(svcs.Get(i).FullName())+"/"+string(m.Name())] = m
			}
		}
	}
	return s, nil
}

func (s *grpcService) methodNames() []string {
	names := make([]string, 0, len(s.methods))
	for n := range s.methods {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// method finds a step's method by its URL's path, refusing what the
// runner cannot call: a method not in the file, client or bidirectional
// streaming.
func (s *grpcService) method(path string) (protoreflect.MethodDescriptor, error) {
	name := strings.TrimPrefix(path, "/")
	m, ok := s.methods[name]
	if !ok {
		return nil, fmt.Errorf("method %q is not in the .proto file (methods: %s)", truncate(name, 80), strings.Join(s.methodNames(), ", "))
	}
	if m.IsStreamingClient() {
		return nil, fmt.Errorf("method %q streams from the client: only unary and server-streaming calls are supported", name)
	}
	return m, nil
}

// grpcTarget is a step's grpc:// or grpcs:// URL taken apart.
type grpcTarget struct {
	addr   string // host:port
	tls    bool
	method string // "/package.Service/Method", as grpc-go names it
}

func parseGRPCURL(s string) (grpcTarget, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "grpc" && u.Scheme != "grpcs") || u.Host == "" || u.Port() == "" {
		return grpcTarget{}, fmt.Errorf("must be a grpc://host:port/package.Service/Method URL (grpcs:// over TLS), got %q", truncate(s, 80))
	}
	if strings.Count(strings.Trim(u.Path, "/"), "/") != 1 || u.RawQuery != "" || u.Fragment != "" {
		return grpcTarget{}, fmt.Errorf("must name a method as /package.Service/Method after the host, got %q", truncate(s, 80))
	}
	return grpcTarget{addr: u.Host, tls: u.Scheme == "grpcs", method: u.Path}, nil
}

// validateGRPC checks a grpc workflow's .proto file and, against it, each
// step's method and (when it is not templated) request message.
func (p *HTTPParams) validateGRPC(errs *FieldErrors) {
	if p.Protocol != ProtocolGRPC {
		if p.GRPC != nil {
			errs.add("proto", "applies to grpc workflows only")
		}
		return
	}
	if p.GRPC == nil || len(p.GRPC.Proto) == 0 {
		errs.add("proto", "is required: the .proto file that describes the service")
		return
	}
	if len(p.GRPC.Proto) > MaxProtoFile {
		errs.add("proto", "the file is more than %d bytes", MaxProtoFile)
		return
	}
	svc, err := compileProto(p.GRPC.ProtoName, p.GRPC.Proto)
	if err != nil {
		errs.add("proto", "%s does not compile: %v", truncate(p.GRPC.ProtoName, 80), err)
		return
	}
	if p.InsecureSkipVerify && p.TLS != nil && len(p.TLS.CA) > 0 {
		return // reported by the TLS check
	}
	p.eachStep(func(path string, st *HTTPStep) {
		t, err := parseTemplate(st.URL)
		if err != nil || t.usesVars() || t.usesData() {
			return // the step's own checks report a bad template; a templated method is checked when called
		}
		target, err := parseGRPCURL(t.sample())
		if err != nil {
			return // reported by checkURL
		}
		m, err := svc.method(target.method)
		if err != nil {
			errs.add(JoinPath(path, "url"), "%v", err)
			return
		}
		if bt, err := parseTemplate(st.Body); err == nil && !bt.usesVars() && !bt.usesData() && !bt.dynamic {
			if err := protojson.Unmarshal([]byte(orEmptyJSON(bt.static)), dynamicpb.NewMessage(m.Input())); err != nil {
				errs.add(JoinPath(path, "body"), "is not a %s in JSON: %v", m.Input().FullName(), err)
			}
		}
	})
}

func orEmptyJSON(s string) string {
	if strings.TrimSpace(s) == "" {
		return "{}"
	}
	return s
}

// validGRPCCode reports whether code is a gRPC status code.
func validGRPCCode(code int) bool {
	return code >= int(codes.OK) && code <= int(codes.Unauthenticated)
}

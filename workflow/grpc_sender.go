package workflow

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// grpcSender calls gRPC methods for a grpc workflow's steps. Each VU has
// its own client connection per target (as k6 does: a VU is a client), so
// VUs do not share an HTTP/2 connection's streams and flow control; a
// VU's connections are used by its goroutine alone, and all are closed
// when the run ends.
type grpcSender struct {
	steps   []preparedStep
	svc     *grpcService
	timeout time.Duration
	tls     *tls.Config
	// static[i] is step i's method when its URL is not templated.
	static []*grpcCall
	conns  []map[string]*grpc.ClientConn // per VU, by target and scheme
	mu     sync.Mutex                    // guards closing against a late dial
	closed bool
}

type grpcCall struct {
	target grpcTarget
	method protoreflect.MethodDescriptor
}

func newGRPCSender(steps []preparedStep, vus int, p *HTTPParams) (sender, error) {
	if p.GRPC == nil {
		return nil, errors.New("grpc workflow without its .proto file")
	}
	svc, err := compileProto(p.GRPC.ProtoName, p.GRPC.Proto)
	if err != nil {
		return nil, fmt.Errorf("proto %s: %w", p.GRPC.ProtoName, err)
	}
	tlsCfg, err := p.tlsConfig()
	if err != nil {
		return nil, err
	}
	if tlsCfg == nil {
		tlsCfg = &tls.Config{}
	}
	timeout := p.Timeout
	if timeout == 0 {
		timeout = DefaultRequestTimeout
	}
	s := &grpcSender{steps: steps, svc: svc, timeout: timeout, tls: tlsCfg,
		static: make([]*grpcCall, len(steps)), conns: make([]map[string]*grpc.ClientConn, vus)}
	for i, st := range steps {
		if st.url.dynamic {
			continue
		}
		c, err := s.call(st.url.static)
		if err != nil {
			return nil, fmt.Errorf("step %q: %w", st.name, err)
		}
		s.static[i] = c
	}
	return s, nil
}

func (s *grpcSender) call(rawURL string) (*grpcCall, error) {
	t, err := parseGRPCURL(rawURL)
	if err != nil {
		return nil, err
	}
	m, err := s.svc.method(t.method)
	if err != nil {
		return nil, err
	}
	return &grpcCall{target: t, method: m}, nil
}

// conn returns vu's connection to t, dialling it lazily: grpc.NewClient
// connects on the first call, whose latency therefore includes the
// handshake, as a new connection's first HTTP request does.
func (s *grpcSender) conn(vu int, t grpcTarget) (*grpc.ClientConn, error) {
	key := t.addr
	if t.tls {
		key = "s:" + key
	}
	if c, ok := s.conns[vu][key]; ok {
		return c, nil
	}
	creds := insecure.NewCredentials()
	if t.tls {
		creds = credentials.NewTLS(s.tls.Clone())
	}
	// No proxy, as the http type's transports: a stray HTTPS_PROXY in a
	// worker's environment must not send the load to a proxy.
	c, err := grpc.NewClient("passthrough:///"+t.addr, grpc.WithTransportCredentials(creds), grpc.WithNoProxy())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return nil, errors.New("grpc: run ended")
	}
	if s.conns[vu] == nil {
		s.conns[vu] = map[string]*grpc.ClientConn{}
	}
	s.conns[vu][key] = c
	return c, nil
}

// send makes one call. The status is the gRPC status code (0 for OK), from
// the server or, for a call that never reached one (refused, unresolvable),
// from grpc-go, which names those Unavailable; a call cut off by its
// timeout or by the run's end is a failure of class timeout or cancelled,
// as an HTTP request would be. The response goes to body as JSON.
func (s *grpcSender) send(ctx context.Context, vu, step int, v tmplVars, rq *hopRequest, body io.Writer) (int, int64, ErrorClass, error) {
	st := &s.steps[step]
	call := s.static[step]
	if call == nil || !rq.first {
		var err error
		if call, err = s.call(rq.url); err != nil {
			return 0, 0, ErrorTransport, err
		}
	}
	req := dynamicpb.NewMessage(call.method.Input())
	if err := protojson.Unmarshal([]byte(orEmptyJSON(rq.body)), req); err != nil {
		return 0, 0, ErrorTransport, fmt.Errorf("request is not a %s in JSON: %w", call.method.Input().FullName(), err)
	}
	sent := int64(proto.Size(req))
	conn, err := s.conn(vu, call.target)
	if err != nil {
		return 0, sent, ErrorConnect, err
	}
	reqCtx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if hdr := st.headerFor(v); len(hdr) > 0 {
		md := metadata.MD{}
		for k, vs := range hdr {
			md.Append(k, vs...)
		}
		reqCtx = metadata.NewOutgoingContext(reqCtx, md)
	}
	if body == nil {
		body = io.Discard
	}
	var head, trailer metadata.MD
	if call.method.IsStreamingServer() {
		err = s.stream(reqCtx, conn, call, req, body, &head, &trailer)
	} else {
		resp := dynamicpb.NewMessage(call.method.Output())
		err = conn.Invoke(reqCtx, call.target.method, req, resp, grpc.Header(&head), grpc.Trailer(&trailer))
		if err == nil {
			err = writeJSON(body, resp)
		}
	}
	if rq.head != nil {
		rq.head.fromHTTP(mdHeader(head, trailer))
	}
	code := status.Code(err)
	switch {
	case code == codes.OK:
		return int(codes.OK), sent, "", nil
	case ctx.Err() != nil:
		return 0, sent, ErrorCancelled, err
	case errors.Is(reqCtx.Err(), context.DeadlineExceeded) && code == codes.DeadlineExceeded:
		return 0, sent, ErrorTimeout, err
	}
	return int(code), sent, "", nil
}

// stream reads a server-streaming call to its end, writing the messages
// as a JSON array.
func (s *grpcSender) stream(ctx context.Context, conn *grpc.ClientConn, call *grpcCall, req proto.Message, body io.Writer, head, trailer *metadata.MD) error {
	cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, call.target.method)
	if err != nil {
		return err
	}
	if err := cs.SendMsg(req); err != nil {
		if errors.Is(err, io.EOF) {
			return cs.RecvMsg(dynamicpb.NewMessage(call.method.Output())) // the status the server ended with
		}
		return err
	}
	if err := cs.CloseSend(); err != nil {
		return err
	}
	if _, err := io.WriteString(body, "["); err != nil {
		return err
	}
	for n := 0; ; n++ {
		msg := dynamicpb.NewMessage(call.method.Output())
		err := cs.RecvMsg(msg)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			*head, _ = cs.Header()
			*trailer = cs.Trailer()
			return err
		}
		if n > 0 {
			if _, err := io.WriteString(body, ","); err != nil {
				return err
			}
		}
		if err := writeJSON(body, msg); err != nil {
			return err
		}
	}
	*head, _ = cs.Header()
	*trailer = cs.Trailer()
	_, err = io.WriteString(body, "]")
	return err
}

func writeJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.Marshal(m)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// mdHeader is a call's header and trailer metadata as header fields, for
// header captures and checks.
func mdHeader(head, trailer metadata.MD) http.Header {
	if len(head) == 0 && len(trailer) == 0 {
		return nil
	}
	h := http.Header{}
	for _, md := range []metadata.MD{head, trailer} {
		for k, vs := range md {
			for _, v := range vs {
				h.Add(k, v)
			}
		}
	}
	return h
}

func (s *grpcSender) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	var errs []error
	for _, m := range s.conns {
		for _, c := range m {
			if err := c.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

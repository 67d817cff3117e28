package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"tempest/leadership"
	"tempest/security"
	"tempest/transport"
	"tempest/wire"
)

// The demo runs what exists today, for real: three nodes on the secure QUIC
// transport (AES-256-GCM envelopes, replay guard, rate limits, breakers) and
// the leader election on top of it. The full gate/manager/worker cluster
// replaces it as those roles land.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	verbose := fs.Bool("v", false, "log transport and election events to stderr")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if *verbose {
		logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	d := &demo{out: stdout, log: logger}
	if err := d.run(ctx); err != nil {
		fmt.Fprintf(stderr, "tempest demo: %v\n", err)
		if errors.Is(err, errUsage) {
			return exitUsage
		}
		return 2
	}
	return exitOK
}

type demo struct {
	out   io.Writer
	log   *slog.Logger
	nodes []*demoNode
	dir   string
}

type demoNode struct {
	id      string
	tr      *transport.QUIC
	store   *leadership.BoltStorage
	elector *leadership.Elector
	cancel  context.CancelFunc
	done    chan struct{}
}

func (d *demo) say(format string, args ...any) { fmt.Fprintf(d.out, format+"\n", args...) }

func (d *demo) run(ctx context.Context) error {
	start := time.Now()
	secret, err := security.GenerateSecret()
	if err != nil {
		return err
	}
	d.dir, err = os.MkdirTemp("", "tempest-demo-")
	if err != nil {
		return fmt.Errorf("demo data dir: %w", err)
	}
	defer os.RemoveAll(d.dir)
	defer d.stopAll()

	d.say("Tempest demo: the secure wire and leader election (the job cluster arrives with the manager/worker issue)")
	d.say("")
	d.say("1. Three nodes start on loopback QUIC, sharing a fresh AUTH_SECRET (key id %08x).", security.KeyID(secret))
	ids := []string{"node-a", "node-b", "node-c"}
	peers := map[string]string{}
	for _, id := range ids {
		n, err := d.startTransport(id, secret)
		if err != nil {
			return err
		}
		peers[id] = n.tr.Addr()
		d.say("   %s listening on %s", id, n.tr.Addr())
	}

	d.say("")
	d.say("2. Every message class crosses the wire sealed with AES-256-GCM (per-message HKDF salt):")
	a, b := d.nodes[0], d.nodes[1]
	for _, n := range d.nodes {
		n.tr.Handle(wire.TypePing, echoHandler)
		n.tr.Handle(wire.TypeJobSubmission, func(ctx context.Context, from transport.Peer, msg wire.Message) (wire.Message, error) {
			js := msg.(*wire.JobSubmission)
			return &wire.JobAck{JobID: js.JobID, Accepted: true}, nil
		})
		n.tr.Handle(wire.TypeWorkflowDispatch, func(ctx context.Context, from transport.Peer, msg wire.Message) (wire.Message, error) {
			wd := msg.(*wire.WorkflowDispatch)
			return &wire.WorkflowDispatchAck{WorkflowID: wd.WorkflowID, Accepted: true, CoresAssigned: []int{0}}, nil
		})
		n.tr.Handle(wire.TypeWorkflowProgress, func(ctx context.Context, from transport.Peer, msg wire.Message) (wire.Message, error) {
			return &wire.ProgressAck{WorkflowID: msg.(*wire.WorkflowProgress).WorkflowID}, nil
		})
	}
	exchanges := []struct {
		class string
		req   wire.Message
	}{
		{"control", &wire.JobSubmission{JobID: "job-1", Name: "smoke", Workflows: []wire.WorkflowSpec{{Name: "get-root", Type: "http", Cores: 1}}}},
		{"dispatch", &wire.WorkflowDispatch{JobID: "job-1", WorkflowID: "job-1/get-root", Cores: 1, FenceToken: 1}},
		{"progress", &wire.WorkflowProgress{JobID: "job-1", WorkflowID: "job-1/get-root", Status: wire.WorkflowRunning, CompletedCount: 42}},
		{"diag", &wire.Ping{Seq: 1, Payload: []byte("hello")}},
	}
	for _, ex := range exchanges {
		t0 := time.Now()
		resp, err := a.tr.Call(ctx, b.tr.Addr(), ex.req)
		if err != nil {
			return fmt.Errorf("%s call: %w", ex.req.Type(), err)
		}
		d.say("   %-8s %s -> %s: %-17s answered %-19s in %s", ex.class, a.id, b.id, ex.req.Type(), resp.Type(), time.Since(t0).Round(time.Microsecond))
	}

	d.say("")
	d.say("3. An intruder with the wrong secret gets nothing through:")
	wrong, err := security.GenerateSecret()
	if err != nil {
		return err
	}
	intruder, err := d.newTransport("intruder", wrong)
	if err != nil {
		return err
	}
	defer intruder.Close()
	_, err = intruder.Call(ctx, b.tr.Addr(), &wire.JobSubmission{JobID: "evil"})
	d.say("   intruder -> %s: %v", b.id, err)
	d.say("   %s counted %d authentication failure(s) and still serves:", b.id, b.tr.Stats().AuthFailures)
	if _, err := a.tr.Call(ctx, b.tr.Addr(), &wire.Ping{Seq: 2}); err != nil {
		return fmt.Errorf("legitimate call after intrusion: %w", err)
	}
	d.say("   %s -> %s ping still answered", a.id, b.id)

	d.say("")
	d.say("4. The three nodes elect a leader (pre-vote, durable terms in bbolt, quorum of the configured 3):")
	for _, n := range d.nodes {
		if err := d.startElector(ctx, n, peers); err != nil {
			return err
		}
	}
	leader, err := d.waitLeader(ctx, "", 10*time.Second)
	if err != nil {
		return err
	}
	st := leader.elector.Status()
	d.say("   %s leads term %d, fence token %d", leader.id, st.Term, st.FenceToken)

	d.say("")
	d.say("5. The leader is stopped; the survivors (2 of 3, still a quorum) elect a new one:")
	killed := time.Now()
	d.stopNode(leader)
	next, err := d.waitLeader(ctx, leader.id, 10*time.Second)
	if err != nil {
		return err
	}
	st2 := next.elector.Status()
	d.say("   %s leads term %d, fence token %d (was %d) after %s", next.id, st2.Term, st2.FenceToken, st.FenceToken, time.Since(killed).Round(time.Millisecond))
	if st2.FenceToken <= st.FenceToken {
		return fmt.Errorf("fence token did not grow: %d then %d", st.FenceToken, st2.FenceToken)
	}

	d.say("")
	d.say("6. Transport counters:")
	for _, n := range d.nodes {
		if n.tr == nil {
			continue
		}
		s := n.tr.Stats()
		d.say("   %s: in %d, out %d, auth failures %d, replays dropped %d, rate limited %d, malformed %d, open breakers %s",
			n.id, s.MessagesIn, s.MessagesOut, s.AuthFailures, s.ReplaysDropped, s.RateLimited, s.Malformed, breakers(s))
	}
	d.say("")
	d.say("demo finished in %s", time.Since(start).Round(time.Millisecond))
	return nil
}

func breakers(s transport.Stats) string {
	if len(s.Breakers) == 0 {
		return "none"
	}
	var parts []string
	for _, b := range s.Breakers {
		parts = append(parts, fmt.Sprintf("%s/%s=%s", b.Peer, b.Class, b.State))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func echoHandler(ctx context.Context, from transport.Peer, msg wire.Message) (wire.Message, error) {
	p := msg.(*wire.Ping)
	return &wire.Pong{Seq: p.Seq, Payload: p.Payload}, nil
}

func (d *demo) newTransport(id, secret string) (*transport.QUIC, error) {
	kr, err := security.NewKeyring(secret, "")
	if err != nil {
		return nil, err
	}
	cfg := transport.DefaultConfig()
	cfg.NodeID = id
	cfg.Keyring = kr
	cfg.Logger = d.log
	cfg.DrainTimeout = time.Second
	cfg.CallTimeout = 3 * time.Second
	return transport.NewQUIC(cfg)
}

func (d *demo) startTransport(id, secret string) (*demoNode, error) {
	tr, err := d.newTransport(id, secret)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", id, err)
	}
	n := &demoNode{id: id, tr: tr}
	d.nodes = append(d.nodes, n)
	return n, nil
}

func (d *demo) startElector(ctx context.Context, n *demoNode, peers map[string]string) error {
	store, err := leadership.OpenBoltStorage(filepath.Join(d.dir, n.id+".db"))
	if err != nil {
		return err
	}
	n.store = store
	el, err := leadership.New(leadership.ElectorConfig{
		Cluster:   "demo",
		Transport: n.tr,
		Peers:     peers,
		Profile:   leadership.LocalProfile(),
		Storage:   store,
		Logger:    d.log,
	})
	if err != nil {
		return fmt.Errorf("elector %s: %w", n.id, err)
	}
	n.elector = el
	rctx, cancel := context.WithCancel(ctx)
	n.cancel = cancel
	n.done = make(chan struct{})
	go func() {
		defer close(n.done)
		if err := el.Run(rctx); err != nil {
			d.log.Error("elector stopped", "node", n.id, "err", err)
		}
	}()
	return nil
}

// waitLeader polls until a node other than exclude leads and every live
// node agrees on it.
func (d *demo) waitLeader(ctx context.Context, exclude string, within time.Duration) (*demoNode, error) {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var leader *demoNode
		agreed := true
		for _, n := range d.nodes {
			if n.elector == nil || n.tr == nil {
				continue
			}
			st := n.elector.Status()
			if st.State == leadership.Leader && n.id != exclude {
				leader = n
			}
			if st.Leader == "" || st.Leader == exclude {
				agreed = false
			}
		}
		if leader != nil && agreed {
			return leader, nil
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return nil, fmt.Errorf("no leader agreed within %s", within)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (d *demo) stopNode(n *demoNode) {
	if n.cancel != nil {
		n.cancel()
		<-n.done
		n.cancel = nil
	}
	if n.tr != nil {
		n.tr.Close()
		n.tr = nil
	}
	if n.store != nil {
		n.store.Close()
		n.store = nil
	}
}

func (d *demo) stopAll() {
	for _, n := range d.nodes {
		d.stopNode(n)
	}
}

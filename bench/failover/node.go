package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"tempest/leadership"
	"tempest/security"
	"tempest/swim"
	"tempest/transport"
	"tempest/wire"
)

// Event is one line a node prints on stdout. Fields not used by an event
// kind are omitted; Leader is meaningful (possibly empty) only for "leader".
type Event struct {
	Ev     string `json:"ev"`
	Node   string `json:"node,omitempty"`
	Leader string `json:"leader,omitempty"`
	Term   uint64 `json:"term,omitempty"`
	State  string `json:"state,omitempty"`
	N      int    `json:"n,omitempty"`
	LHM    *int   `json:"lhm,omitempty"`
	QUIC   string `json:"quic,omitempty"`
	Swim   string `json:"swim,omitempty"`
	PID    int    `json:"pid,omitempty"`
	// Watch is set on stall, quiet and udp events (watch.go).
	Watch *WatchInfo `json:"watch,omitempty"`
	T     int64      `json:"t"`
}

// Time is the event's timestamp.
func (e Event) Time() time.Time { return time.Unix(0, e.T) }

// emitter serialises events onto one writer; callbacks of swim and the
// elector run on different goroutines.
type emitter struct {
	mu  sync.Mutex
	enc *json.Encoder
	log *slog.Logger
}

func (e *emitter) emit(ev Event) {
	if ev.T == 0 {
		ev.T = time.Now().UnixNano()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.enc.Encode(ev); err != nil {
		// The driver has gone away; nothing useful is left to do but say so.
		e.log.Error("emit event", "ev", ev.Ev, "err", err)
	}
}

// nodeFlags are the node subcommand's settings.
type nodeFlags struct {
	id              string
	bind            string
	quicPort        int
	swimPort        int
	peers           map[string]string
	seeds           []string
	swimProfile     string
	electionProfile string
	dataDir         string
	feedLHM         bool
	logLevel        slog.Level
	groupNice       int
}

func parseNodeFlags(args []string) (nodeFlags, error) {
	var (
		nf       nodeFlags
		peers    string
		seeds    string
		logLevel string
	)
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	fs.StringVar(&nf.id, "id", "", "node id, also its swim name (required)")
	fs.StringVar(&nf.bind, "bind", "127.0.0.1", "IP address for both the QUIC and the swim listeners")
	fs.IntVar(&nf.quicPort, "quic-port", 0, "UDP port of the QUIC transport")
	fs.IntVar(&nf.swimPort, "swim-port", 0, "UDP+TCP port of swim (memberlist)")
	fs.StringVar(&peers, "peers", "", "every election member including this one: id=quicaddr,id=quicaddr,...")
	fs.StringVar(&seeds, "seeds", "", "swim addresses to join, comma-separated (empty: wait to be joined)")
	fs.StringVar(&nf.swimProfile, "swim-profile", swim.ProfileLAN, "swim timing profile: lan (gates), fastlan (the default for managers and workers), local or test")
	fs.StringVar(&nf.electionProfile, "election-profile", "lan", "leadership profile: lan, local or test")
	fs.StringVar(&nf.dataDir, "data", "", "data directory for the bbolt election state (required)")
	fs.BoolVar(&nf.feedLHM, "lhm", true, "pass swim's local health score to the elector")
	fs.StringVar(&logLevel, "log-level", "warn", "stderr log level: debug, info, warn or error")
	fs.IntVar(&nf.groupNice, "group-nice", 0, "nice value of this process's scheduling group (autogroup), for a node started in a session of its own")
	if err := fs.Parse(args); err != nil {
		return nf, errUsage
	}
	var errs []error
	if nf.id == "" {
		errs = append(errs, errors.New("-id is required"))
	}
	if nf.dataDir == "" {
		errs = append(errs, errors.New("-data is required"))
	}
	if net.ParseIP(nf.bind) == nil {
		errs = append(errs, fmt.Errorf("-bind %q is not an IP address", nf.bind))
	}
	var err error
	if nf.peers, err = parsePeers(peers); err != nil {
		errs = append(errs, fmt.Errorf("-peers: %w", err))
	} else if _, ok := nf.peers[nf.id]; !ok {
		errs = append(errs, fmt.Errorf("-peers must include this node %q", nf.id))
	}
	if seeds != "" {
		nf.seeds = strings.Split(seeds, ",")
	}
	if err := nf.logLevel.UnmarshalText([]byte(logLevel)); err != nil {
		errs = append(errs, fmt.Errorf("-log-level: %w", err))
	}
	return nf, errors.Join(errs...)
}

func parsePeers(s string) (map[string]string, error) {
	peers := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(kv, "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("%q is not id=host:port", kv)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("%q: %w", kv, err)
		}
		if _, dup := peers[id]; dup {
			return nil, fmt.Errorf("id %q listed twice", id)
		}
		peers[id] = addr
	}
	return peers, nil
}

// runNode is one cluster member. It runs until ctx ends (SIGTERM from the
// driver) or it is killed, which is the point.
func runNode(ctx context.Context, args []string) error {
	nf, err := parseNodeFlags(args)
	if err != nil {
		return err
	}
	// base carries no attributes: swim, leadership and transport each add
	// the node id (and their component) themselves.
	base := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: nf.logLevel}))
	log := base.With("node", nf.id)
	if nf.groupNice != 0 {
		// The autogroup is this process's session, which the driver made
		// for it alone: its nice sets the group's weight against the
		// other groups, as CPUWeight does for a systemd unit's cgroup.
		if err := os.WriteFile("/proc/self/autogroup", []byte(strconv.Itoa(nf.groupNice)), 0); err != nil {
			return fmt.Errorf("set autogroup nice %d: %w", nf.groupNice, err)
		}
	}
	slog.SetDefault(log)
	em := &emitter{enc: json.NewEncoder(os.Stdout), log: log}
	return runMember(ctx, nf, em, base, log)
}

func runMember(ctx context.Context, nf nodeFlags, em *emitter, base, log *slog.Logger) (err error) {
	secret := os.Getenv("AUTH_SECRET")
	if secret == "" {
		return errors.New("AUTH_SECRET is not set")
	}
	keyring, err := security.NewKeyring(secret, os.Getenv("AUTH_SECRET_PREVIOUS"))
	if err != nil {
		return fmt.Errorf("keyring: %w", err)
	}
	electionProfile, err := leadership.ProfileByName(nf.electionProfile)
	if err != nil {
		return err
	}
	if _, err := swim.ProfileTiming(nf.swimProfile); err != nil {
		return fmt.Errorf("-swim-profile: %w", err)
	}

	// Every resource is released in reverse order, whatever fails.
	var closers []func() error
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			if cerr := closers[i](); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}
	}()

	tcfg := transport.DefaultConfig()
	tcfg.NodeID = nf.id
	tcfg.ListenAddr = net.JoinHostPort(nf.bind, strconv.Itoa(nf.quicPort))
	tcfg.Keyring = keyring
	tcfg.Logger = base.With("component", "transport")
	tcfg.DrainTimeout = 500 * time.Millisecond
	tcfg.Linger = 100 * time.Millisecond
	tr, err := transport.NewQUIC(tcfg)
	if err != nil {
		return fmt.Errorf("quic transport: %w", err)
	}
	closers = append(closers, func() error {
		if err := tr.Close(); err != nil {
			return fmt.Errorf("close transport: %w", err)
		}
		return nil
	})

	if err := os.MkdirAll(nf.dataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	store, err := leadership.OpenBoltStorage(filepath.Join(nf.dataDir, "leadership.db"))
	if err != nil {
		return fmt.Errorf("election storage: %w", err)
	}
	closers = append(closers, func() error {
		if err := store.Close(); err != nil {
			return fmt.Errorf("close storage: %w", err)
		}
		return nil
	})

	el, err := leadership.New(leadership.ElectorConfig{
		Cluster:   "bench/failover",
		Transport: tr,
		Peers:     nf.peers,
		Profile:   electionProfile,
		Storage:   store,
		Logger:    base,
		OnLeaderChange: func(leader string, term uint64) {
			em.emit(Event{Ev: "leader", Leader: leader, Term: term})
		},
	})
	if err != nil {
		return fmt.Errorf("elector: %w", err)
	}
	// Run is stopped through its context below; Stop is the belt to that
	// brace and is safe whether or not Run ever started.
	closers = append(closers, func() error { el.Stop(); return nil })

	clock := &ackClock{}
	sn, err := swim.New(swim.Config{
		NodeName:         nf.id,
		BindAddr:         nf.bind,
		BindPort:         nf.swimPort,
		Meta:             swim.NodeMeta{Role: wire.RoleManager, QUICAddr: tr.Addr()},
		Profile:          nf.swimProfile,
		Keys:             keyring.MemberlistKeys(),
		BroadcastTimeout: 5 * time.Second,
		Logger:           slog.New(&suspicionWatch{next: base.Handler(), em: em}),
		Embedder:         clock,
		Events: swim.EventHandler{
			OnJoin: func(n swim.NodeInfo) { em.emit(Event{Ev: "join", Node: n.Name}) },
			OnDead: func(n swim.NodeInfo) { em.emit(Event{Ev: "dead", Node: n.Name, State: n.State.String()}) },
		},
	})
	if err != nil {
		return fmt.Errorf("swim: %w", err)
	}
	closers = append(closers, func() error {
		if err := sn.Shutdown(); err != nil {
			return fmt.Errorf("swim shutdown: %w", err)
		}
		return nil
	})
	em.emit(Event{Ev: "up", Node: nf.id, QUIC: tr.Addr(), Swim: sn.Addr(), PID: os.Getpid()})

	// The elector and the health feed run until ctx ends; the deferred
	// closers run only after both have returned.
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	runErr := make(chan error, 1)
	wg.Go(func() {
		if err := el.Run(runCtx); err != nil {
			runErr <- fmt.Errorf("elector: %w", err)
			cancel()
		}
	})
	if nf.feedLHM {
		wg.Go(func() { feedHealth(runCtx, sn, el, em, electionProfile.TickInterval) })
	}
	wg.Go(func() { watch(runCtx, em, clock) })
	defer func() {
		cancel()
		wg.Wait()
	}()

	if len(nf.seeds) > 0 {
		n, err := joinRetry(runCtx, sn, nf.seeds, log)
		if err != nil {
			return err
		}
		em.emit(Event{Ev: "ready", N: n})
	} else {
		em.emit(Event{Ev: "ready"})
	}

	select {
	case <-runCtx.Done():
	case err := <-runErr:
		return err
	}
	select {
	case err := <-runErr:
		return err
	default:
	}
	log.Info("stopping", "cause", context.Cause(ctx))
	return nil
}

// joinRetry joins the seeds, retrying while none answers (they may still be
// starting), until ctx ends.
func joinRetry(ctx context.Context, sn *swim.Node, seeds []string, log *slog.Logger) (int, error) {
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		n, err := sn.Join(ctx, seeds)
		if err == nil {
			return n, nil
		}
		log.Debug("join failed, retrying", "attempt", attempt, "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, fmt.Errorf("join %v: %w (last error: %w)", seeds, ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// feedHealth passes swim's Lifeguard score to the elector every election
// tick, so a degraded node neither leads nor campaigns, as in the roles.
func feedHealth(ctx context.Context, sn *swim.Node, el *leadership.Elector, em *emitter, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	last := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		lhm := sn.LocalHealth()
		el.SetLHM(lhm)
		if lhm != last {
			em.emit(Event{Ev: "lhm", LHM: &lhm})
			last = lhm
		}
	}
}

// suspicionWatch passes swim's log records on to the node's handler and turns
// memberlist's suspicion lines into events, because memberlist reports
// suspicion to nobody but its log. A suspicion that is refuted never becomes
// a dead event, but it is the near miss that shows how close a healthy node
// came to being declared dead. The texts are memberlist v0.7.0's (state.go):
//
//	[INFO] memberlist: Suspect n2 has failed, no acks received   (the prober)
//	[WARN] memberlist: Refuting a suspect message (from: n1)     (the suspect)
type suspicionWatch struct {
	next slog.Handler
	em   *emitter
}

func (h *suspicionWatch) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.next.Enabled(ctx, l)
}

func (h *suspicionWatch) Handle(ctx context.Context, r slog.Record) error {
	if name, ok := strings.CutPrefix(r.Message, "Suspect "); ok {
		if name, ok = strings.CutSuffix(name, " has failed, no acks received"); ok {
			h.em.emit(Event{Ev: "suspect", Node: name, T: r.Time.UnixNano()})
		}
	} else if from, ok := strings.CutPrefix(r.Message, "Refuting a suspect message (from: "); ok {
		h.em.emit(Event{Ev: "refute", Node: strings.TrimSuffix(from, ")"), T: r.Time.UnixNano()})
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *suspicionWatch) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &suspicionWatch{next: h.next.WithAttrs(attrs), em: h.em}
}

func (h *suspicionWatch) WithGroup(name string) slog.Handler {
	return &suspicionWatch{next: h.next.WithGroup(name), em: h.em}
}

// runHog burns one core until it is killed or interrupted.
func runHog(ctx context.Context) error {
	runtime.GOMAXPROCS(1)
	var x uint64
	for i := uint64(0); ; i++ {
		// Check for cancellation rarely so the loop stays CPU-bound.
		if i&(1<<24-1) == 0 && ctx.Err() != nil {
			return nil
		}
		x = x*6364136223846793005 + 1442695040888963407
		if x == 0 {
			fmt.Fprint(io.Discard, x)
		}
	}
}

package swim

import (
	"bytes"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"tempest/wire"
)

func sampleWorkerHeartbeat() *wire.WorkerHeartbeat {
	return &wire.WorkerHeartbeat{
		NodeID: "worker-1", State: wire.WorkerHealthy, TotalCores: 64, AvailableCores: 12,
		QueueDepth: 3, CPUPercent: 81.5, MemoryPercent: 40.25, Version: 1234567,
		ActiveWorkflows: map[string]string{"wf-1": "RUNNING", "wf-2": "ASSIGNED"},
		Datacenter:      "dc1", Addr: "10.0.0.7:9000",
	}
}

func sampleManagerHeartbeat() *wire.ManagerHeartbeat {
	return &wire.ManagerHeartbeat{
		NodeID: "manager-1", Datacenter: "dc1", IsLeader: true, Term: 7, Version: 99,
		ActiveJobs: 4, ActiveWorkflows: 40, WorkerCount: 12, AvailableCores: 300,
		Addr: "10.0.0.2:9000", LeaderID: "manager-1",
		SendKeyID: 0x1a2b3c4d, AcceptKeyIDs: []uint32{0x1a2b3c4d, 0x5e6f7081},
	}
}

func TestHeartbeatRoundTrip(t *testing.T) {
	w := sampleWorkerHeartbeat()
	b, err := EncodeWorkerHeartbeat(w)
	if err != nil {
		t.Fatal(err)
	}
	if typ, _ := StateType(b); typ != wire.TypeWorkerHeartbeat {
		t.Errorf("type %v", typ)
	}
	got, err := DecodeWorkerHeartbeat(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.NodeID != w.NodeID || got.AvailableCores != 12 || got.ActiveWorkflows["wf-2"] != "ASSIGNED" || got.CPUPercent != 81.5 {
		t.Errorf("round trip: %+v", got)
	}

	m := sampleManagerHeartbeat()
	b, err = EncodeManagerHeartbeat(m)
	if err != nil {
		t.Fatal(err)
	}
	gm, err := DecodeManagerHeartbeat(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gm, m) {
		t.Errorf("round trip: %+v != %+v", gm, m)
	}
	t.Logf("worker heartbeat %d bytes, manager heartbeat %d bytes", len(mustEncodeWorker(t, w)), len(b))
}

func mustEncodeWorker(t *testing.T, hb *wire.WorkerHeartbeat) []byte {
	b, err := EncodeWorkerHeartbeat(hb)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestHeartbeatKindMismatch(t *testing.T) {
	b, _ := EncodeManagerHeartbeat(sampleManagerHeartbeat())
	if _, err := DecodeWorkerHeartbeat(b); !errors.Is(err, ErrStateType) {
		t.Errorf("manager payload decoded as worker: %v", err)
	}
	if _, err := DecodeManagerHeartbeat([]byte{0}); err == nil {
		t.Error("1-byte payload decoded")
	}
}

func TestHeartbeatSizeCap(t *testing.T) {
	hb := sampleWorkerHeartbeat()
	hb.ActiveWorkflows = map[string]string{}
	for i := 0; i < 100; i++ {
		hb.ActiveWorkflows[strings.Repeat("w", 8)+string(rune('A'+i%26))+string(rune('a'+i/26))] = "RUNNING"
	}
	if _, err := EncodeWorkerHeartbeat(hb); !errors.Is(err, ErrStateTooLarge) {
		t.Errorf("oversized heartbeat encoded: %v", err)
	}
	big := append([]byte{0, byte(wire.TypeWorkerHeartbeat)}, bytes.Repeat([]byte{0}, MaxStateSize)...)
	if _, err := DecodeWorkerHeartbeat(big); !errors.Is(err, ErrStateTooLarge) {
		t.Errorf("oversized payload decoded: %v", err)
	}
}

func TestNodeMetaRoundTrip(t *testing.T) {
	m := NodeMeta{Role: wire.RoleGate, Datacenter: "eu", QUICAddr: "[::1]:9000", Tags: map[string]string{"v": "1"}}
	b, err := EncodeNodeMeta(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeNodeMeta(b)
	if err != nil || got.Role != m.Role || got.QUICAddr != m.QUICAddr || got.Tags["v"] != "1" {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	lb, err := encodeMeta(m, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(lb)-len(b) > leaveFlagSize {
		t.Errorf("leave flag costs %d bytes, reserved %d", len(lb)-len(b), leaveFlagSize)
	}
	if got, leaving, err := decodeMeta(lb); err != nil || !leaving || got.Datacenter != "eu" {
		t.Errorf("leaving meta: %+v %v %v", got, leaving, err)
	}
	if _, leaving, _ := decodeMeta(b); leaving {
		t.Error("ordinary meta decoded as leaving")
	}
	if got, err := DecodeNodeMeta(nil); err != nil || got.Role != "" {
		t.Errorf("empty meta: %+v %v", got, err)
	}
	if _, err := DecodeNodeMeta([]byte{0xff, 0x00}); err == nil {
		t.Error("garbage meta decoded")
	}
}

func TestMemberlistLogLevels(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	lg := newMemberlistLogger(l)
	lg.Printf("[DEBUG] memberlist: probing %s", "x")
	lg.Printf("[WARN] memberlist: Refuting a suspect message")
	lg.Printf("[ERR] memberlist: Failed to send ping")
	lg.Printf("no tag at all")
	out := buf.String()
	for _, want := range []string{
		`level=DEBUG msg="probing x"`,
		`level=WARN msg="Refuting a suspect message"`,
		`level=ERROR msg="Failed to send ping"`,
		`level=INFO msg="no tag at all"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

package swim

import (
	"errors"
	"strings"
	"testing"
	"time"

	"tempest/wire"
)

func validConfig() Config {
	cfg := DefaultConfig()
	cfg.NodeName = "w1"
	cfg.Meta = NodeMeta{Role: wire.RoleWorker, Datacenter: "dc1", QUICAddr: "10.0.0.1:9000"}
	return cfg
}

func TestValidateAcceptsDefaultsWithIdentity(t *testing.T) {
	cfg := validConfig()
	if cfg.Profile != ProfileFastLAN {
		t.Errorf("default profile %q, want fastlan", cfg.Profile)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
	cfg.Keys = [][]byte{make([]byte, KeySize), append(make([]byte, KeySize-1), 1)}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("two distinct keys rejected: %v", err)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	cfg := Config{
		BindAddr:      "not-an-ip",
		BindPort:      70000,
		AdvertiseAddr: "nope",
		AdvertisePort: -1,
		Meta:          NodeMeta{Role: "janitor", QUICAddr: "no-port"},
		Profile:       "wan",
		Keys:          [][]byte{make([]byte, 16), make([]byte, 16)},
	}
	err := cfg.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	msg := err.Error()
	for _, want := range []string{
		"NodeName: required",
		"BindAddr:",
		"BindPort:",
		"AdvertiseAddr:",
		"AdvertisePort:",
		`Meta: Role "janitor" unknown`,
		"Meta: QUICAddr",
		"Profile:",
		"Keys: key 0 is 16 bytes",
		"Keys: key 1 duplicates key 0",
		"BroadcastTimeout:",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
}

func TestValidateMetaSize(t *testing.T) {
	cfg := validConfig()
	cfg.Meta.Tags = map[string]string{"blob": strings.Repeat("x", MaxMetaSize)}
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "Meta:") || !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("oversized meta: %v", err)
	}

	// The largest meta Validate accepts must still fit with the leave flag.
	cfg.Meta.Tags = map[string]string{"blob": ""}
	base, err := EncodeNodeMeta(cfg.Meta)
	if err != nil {
		t.Fatal(err)
	}
	for pad := MaxMetaSize - len(base) - 8; ; pad++ {
		cfg.Meta.Tags["blob"] = strings.Repeat("x", pad)
		if _, err := EncodeNodeMeta(cfg.Meta); err != nil {
			break
		}
		b, err := encodeMeta(cfg.Meta, true)
		if err != nil || len(b) > MaxMetaSize {
			t.Fatalf("accepted meta overflows once leaving: %d bytes, %v", len(b), err)
		}
	}
}

func TestValidateEmptyKeysMeansPlaintext(t *testing.T) {
	cfg := validConfig()
	cfg.Keys = nil
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := checkKeys(nil); err == nil {
		t.Error("SetKeys would accept an empty keyring")
	}
}

func TestProfiles(t *testing.T) {
	for _, p := range []string{ProfileFastLAN, ProfileLAN, ProfileLocal, ProfileTest} {
		if _, err := ProfileTiming(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if _, err := ProfileTiming("wan"); err == nil {
		t.Error("unknown profile accepted")
	}

	tm := testTiming(t)
	if tm.ProbeInterval != 200*time.Millisecond || tm.ProbeTimeout != 100*time.Millisecond ||
		tm.SuspicionMult != 3 || tm.GossipInterval != 50*time.Millisecond {
		t.Errorf("test profile drifted: %+v", tm)
	}

	lan, _ := ProfileTiming(ProfileLAN)
	fast, _ := ProfileTiming(ProfileFastLAN)
	cases := []struct {
		tm     Timing
		n      int
		lo, hi time.Duration
	}{
		{tm, 3, 600 * time.Millisecond, 1200 * time.Millisecond},
		{tm, 2, 600 * time.Millisecond, 600 * time.Millisecond}, // nobody left to confirm
		{lan, 3, 4 * time.Second, 4 * time.Second},              // k=2 needs n ≥ 4
		{lan, 5, 4 * time.Second, 24 * time.Second},
		{lan, 100, 8 * time.Second, 48 * time.Second},
		// fastlan: one confirmation wanted already at 3 nodes; a
		// confirmed suspicion runs 1.2 s, a lone one 7.2 s.
		{fast, 2, 1200 * time.Millisecond, 1200 * time.Millisecond}, // nobody left to confirm
		{fast, 3, 1200 * time.Millisecond, 7200 * time.Millisecond},
		{fast, 5, 1200 * time.Millisecond, 7200 * time.Millisecond},
		{fast, 100, 2400 * time.Millisecond, 14400 * time.Millisecond},
	}
	for _, c := range cases {
		lo, hi := c.tm.SuspicionTimeout(c.n)
		if lo != c.lo || hi != c.hi {
			t.Errorf("interval %s n=%d: suspicion %s..%s, want %s..%s", c.tm.ProbeInterval, c.n, lo, hi, c.lo, c.hi)
		}
	}
	if b := tm.DetectionBound(3); b < 2*time.Second || b > 3*time.Second {
		t.Errorf("test profile detection bound for 3 nodes is %s", b)
	}
	// What fastlan is for: in a datacenter of three, a suspicion only one
	// prober holds (its lost packets, its own stall) outlasts lan's
	// window, while a crash every survivor confirms is declared after a
	// third of it.
	fastLo, fastHi := fast.SuspicionTimeout(3)
	if lanLo, _ := lan.SuspicionTimeout(3); fastHi <= lanLo || 3*fastLo > lanLo {
		t.Errorf("fastlan suspicion at n=3 is %s..%s; want a third of lan's %s confirmed and more than it alone", fastLo, fastHi, lanLo)
	}
}

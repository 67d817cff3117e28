package api

import (
	"testing"

	"tempest/wire"
)

func TestAdvertisedURL(t *testing.T) {
	for _, tc := range []struct{ advertise, listen, want string }{
		{"https://gate.example:8443", "0.0.0.0:8080", "https://gate.example:8443"},
		{"", "10.0.0.5:8080", "http://10.0.0.5:8080"},
		{"", "[::1]:8080", "http://[::1]:8080"},
		{"", "0.0.0.0:8080", ""}, // a wildcard is not an address anyone can dial
		{"", "[::]:8080", ""},
		{"", ":8080", ""},
		{"", "127.0.0.1:0", ""}, // known once the server binds
		{"", "nonsense", ""},
	} {
		if got := AdvertisedURL(tc.advertise, tc.listen); got != tc.want {
			t.Errorf("AdvertisedURL(%q, %q) = %q, want %q", tc.advertise, tc.listen, got, tc.want)
		}
	}
}

func TestAddresses(t *testing.T) {
	a := NewAddresses("m1", "")
	if err := a.Learn("m2", "http://m2:8080"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"m2:8080", "ftp://m2", "http://", "http://user:pw@m2:8080", "://x"} {
		if err := a.Learn("m2", bad); err == nil {
			t.Errorf("Learn took %q", bad)
		}
	}
	if ok, url := a.Leader(true, "m1"); !ok || url != "" {
		t.Fatalf("leading before the server bound: %v %q", ok, url)
	}
	a.SetSelf("http://m1:8080")
	for _, tc := range []struct {
		leading bool
		leader  string
		ok      bool
		url     string
	}{
		{true, "m1", true, "http://m1:8080"},
		{false, "m2", false, "http://m2:8080"},
		{false, "m3", false, ""}, // not published (yet)
		{false, "", false, ""},
	} {
		if ok, url := a.Leader(tc.leading, tc.leader); ok != tc.ok || url != tc.url {
			t.Errorf("Leader(%v, %q) = %v %q, want %v %q", tc.leading, tc.leader, ok, url, tc.ok, tc.url)
		}
	}
	e := a.NotLeader(&wire.Error{Code: wire.CodeNotLeader, Leader: "m2", LeaderAddr: "10.0.0.2:7400"})
	if e.LeaderAddr != "http://m2:8080" {
		t.Fatalf("NotLeader names %q, want the leader's API URL", e.LeaderAddr)
	}
	if e := a.NotLeader(&wire.Error{Code: wire.CodeNotLeader, LeaderAddr: "10.0.0.2:7400"}); e.LeaderAddr != "" {
		t.Fatalf("NotLeader without a leader kept the QUIC address %q", e.LeaderAddr)
	}
}

package main

import "testing"

// A sample goes to the innermost known component on its stack: the
// allocation inside a CBOR decode is CBOR, the syscall under quic-go is
// QUIC, a GC worker is GC.
func TestSamplesByComponent(t *testing.T) {
	script := `tempest-manager 
	    ffffffff81000001 finish_task_switch.isra.0
	              4a0001 runtime.mallocgc
	              4a0002 github.com/fxamacker/cbor/v2.(*decoder).parseToValue
	              4a0003 tempest/wire.Unmarshal

tempest-worker 
	    ffffffff81000002 udp_sendmsg
	              4b0001 syscall.Syscall6
	              4b0002 github.com/quic-go/quic-go.(*sendConn).Write

tempest-worker 
	              4c0001 runtime.scanobject
	              4c0002 runtime.gcDrain
	              4c0003 runtime.gcBgMarkWorker

`
	s := readSamples([]byte(script))
	if len(s) != 3 {
		t.Fatalf("%d samples: %+v", len(s), s)
	}
	want := []string{"CBOR encode/decode", "quic-go (incl. UDP syscalls)", "Go GC (background)"}
	for i, w := range want {
		if got := component(s[i].frames); got != w {
			t.Errorf("sample %d (%s): %q, want %q", i, s[i].comm, got, w)
		}
	}
	if s[0].comm != "tempest-manager" || len(s[0].frames) != 4 {
		t.Errorf("first sample %+v", s[0])
	}
}

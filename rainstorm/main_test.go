package rainstorm

import (
	"os"
	"testing"

	"tempest/internal/testutil"
)

func TestMain(m *testing.M) {
	// The tests run exec programs through this binary as their shim.
	if len(os.Args) > 1 && os.Args[1] == ExecShimArg {
		os.Exit(ExecShimMain(os.Args[2:]))
	}
	testutil.VerifyNoLeaks(m)
}

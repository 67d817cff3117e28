package jobs

import (
	"testing"

	"tempest/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

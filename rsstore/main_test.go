package rsstore

import (
	"testing"

	"tempest/internal/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

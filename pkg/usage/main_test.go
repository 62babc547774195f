package usage

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the package's tests, or, in the child TestRealProc
// starts, the helper that burns CPU. It fails the tests if a goroutine
// they started is still running when they end.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(burnHelper())
	}
	goleak.VerifyTestMain(m)
}

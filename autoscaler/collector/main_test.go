package collector

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine they started is still
// running when they end. Started with statsServerEnv set, the test binary
// is instead the stats server BenchmarkScrape scrapes.
func TestMain(m *testing.M) {
	if os.Getenv(statsServerEnv) != "" {
		os.Exit(serveStats())
	}
	goleak.VerifyTestMain(m)
}

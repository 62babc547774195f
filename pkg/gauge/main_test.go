package gauge

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine they started is still
// running when they end: a scrape that outlived its Timeout, or a
// connection its Scraper did not let go.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

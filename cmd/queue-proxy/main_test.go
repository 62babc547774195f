package main

import (
	"testing"

	"github.com/swell-run/swell/internal/proctest"
)

// TestMain removes the binaries the end-to-end tests built.
func TestMain(m *testing.M) { proctest.Main(m) }

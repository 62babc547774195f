package loadgen

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine they started is still
// running when they end. Vegeta's attacker notices Stop only when its
// pacer's wait for the next arrival ends, so a run stopped early leaves it
// asleep until then (an hour at most in these tests' schedules), and the
// goroutine that drains its results with it; the command's process ends
// with the run, so nothing accumulates.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/tsenart/vegeta/v12/lib.(*Attacker).Attack.func1"),
		goleak.IgnoreAnyFunction("github.com/tsenart/vegeta/v12/lib.(*Attacker).attack"),
		goleak.IgnoreAnyFunction("github.com/swell-run/swell/pkg/loadgen.(*generator).run.func2"))
}

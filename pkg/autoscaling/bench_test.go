package autoscaling

import "testing"

// BenchmarkParse parses a typical Deployment's annotations: a few
// autoscaling keys among others. Parse runs when a service's
// configuration changes, not per tick.
func BenchmarkParse(b *testing.B) {
	ann := map[string]string{
		Prefix + KeyTarget:                                 "8",
		Prefix + KeyTargetUtilizationPercentage:            "80",
		Prefix + KeyWindow:                                 "2m",
		Prefix + KeyMinScale:                               "1",
		Prefix + KeyMaxScale:                               "20",
		ContainerConcurrencyKey:                            "10",
		"kubectl.kubernetes.io/last-applied-configuration": "{}",
	}
	d := DefaultDefaults()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(ann, 10, d); err != nil {
			b.Fatal(err)
		}
	}
}

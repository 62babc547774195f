// Package stats measures request load the way Swell's autoscaler consumes
// it — time-weighted average concurrency and request counts per reporting
// period — and defines the compact wire format that carries it.
package stats

import (
	"encoding"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Report is one reporting period's load as seen by one queue-proxy (or, per
// service, by one activator).
//
// In JSON, End is RFC 3339 with nanoseconds and both durations are integer
// nanoseconds, with the unit in the field name (periodNs, uptimeNs), so the
// JSON form carries exactly what the binary form does.
type Report struct {
	// End is when the period ended.
	End time.Time `json:"end"`
	// Period is how long the period lasted.
	Period time.Duration `json:"periodNs"`
	// Concurrency is the time-weighted average number of requests held
	// (queued or at the app) over the period.
	Concurrency float64 `json:"concurrency"`
	// ProxiedConcurrency is the part of Concurrency from requests that came
	// through the activator (network.ProxyHeader).
	ProxiedConcurrency float64 `json:"proxiedConcurrency"`
	// Requests is the number of requests that arrived in the period.
	Requests uint64 `json:"requests"`
	// ProxiedRequests is the part of Requests that came through the activator.
	ProxiedRequests uint64 `json:"proxiedRequests"`
	// Uptime is how long the reporting process has been running (lets the
	// autoscaler treat the first reports of a new pod with care).
	Uptime time.Duration `json:"uptimeNs"`
	// Attributed says the reporter splits its proxied figures by activator
	// (ByActivator): every version-2 report does, even with no share.
	Attributed bool `json:"attributed,omitempty"`
	// ByActivator splits the proxied figures among the activators that
	// named themselves on their requests (network.ActivatorHeader), at
	// most MaxActivatorShares of them, by ActivatorKey. What is proxied
	// but in no share came from an activator that did not name itself, or
	// from one past the limit.
	ByActivator []ActivatorShare `json:"byActivator,omitempty"`
	// App is what the reporter measured of the app itself (version 3);
	// zero from a reporter that measures nothing, or speaks an older
	// version.
	App AppUsage `json:"app,omitzero"`
}

// AppUsage is what a queue-proxy measured of its app in a period: each
// figure only when its Has flag is set (the service scales on it, and the
// measurement worked), and zero otherwise.
type AppUsage struct {
	// CPU is the cores the app's processes used, averaged over the period.
	CPU    float64 `json:"cpu,omitempty"`
	HasCPU bool    `json:"hasCpu,omitempty"`
	// Memory is the bytes the app's processes held resident at its end.
	Memory    uint64 `json:"memory,omitempty"`
	HasMemory bool   `json:"hasMemory,omitempty"`
	// Gauge is the value of the app gauge whose selector has the key
	// GaugeKey, read from the app during the period.
	Gauge    float64 `json:"gauge,omitempty"`
	GaugeKey uint64  `json:"gaugeKey,omitempty"`
	HasGauge bool    `json:"hasGauge,omitempty"`
	// GaugeProblem says why a gauge the pod should read is missing, so
	// that the autoscaler can tell its users; GaugeOK with a gauge.
	GaugeProblem GaugeProblem `json:"gaugeProblem,omitempty"`
}

// GaugeProblem is why a queue-proxy has no value of its app gauge.
type GaugeProblem uint8

// The gauge problems, as the queue-proxy classifies a failed read.
const (
	GaugeOK GaugeProblem = iota
	// GaugeUnreachable: the app's metrics endpoint did not answer.
	GaugeUnreachable
	// GaugeTimeout: it did not answer in time.
	GaugeTimeout
	// GaugeStatus: it answered with a status other than 2xx.
	GaugeStatus
	// GaugeTooLarge: its page was longer than the queue-proxy reads.
	GaugeTooLarge
	// GaugeNotNumber: its page does not parse as the Prometheus format.
	GaugeNotNumber
	// GaugeMissing: its page holds no series the selector matches.
	GaugeMissing
	// GaugeType: the series is a histogram or a summary.
	GaugeType
	// GaugeNotFinite: the value is NaN or infinite.
	GaugeNotFinite
	// GaugeNegative: the value is below zero.
	GaugeNegative
	// NumGaugeProblems counts the problems, GaugeOK included: the length
	// of an array indexed by them.
	NumGaugeProblems
)

var gaugeProblemNames = [NumGaugeProblems]string{
	"ok", "unreachable", "timeout", "status", "too large", "not a number", "missing", "wrong type", "not finite", "negative",
}

// String names the problem in a few words.
func (p GaugeProblem) String() string {
	if p < NumGaugeProblems {
		return gaugeProblemNames[p]
	}
	return "unknown problem " + strconv.Itoa(int(p))
}

// ActivatorShare is one activator's part of a report's proxied figures.
type ActivatorShare struct {
	// Activator is ActivatorKey of the activator's name; never 0.
	Activator   uint64  `json:"activator"`
	Concurrency float64 `json:"concurrency"`
	Requests    uint64  `json:"requests"`
}

// MaxActivatorShares bounds Report.ByActivator: a deployment runs a few
// activators, and a client that names many on its requests gets no more
// room.
const MaxActivatorShares = 8

// ActivatorKey is the key of an activator's name in reports: its 64-bit
// FNV-1a hash, 1 for a hash of 0, so that 0 never names one. The pods
// hash the name an activator puts on its requests, the autoscaler the
// name it reports under; equal names meet.
func ActivatorKey(name string) uint64 { return key(name) }

// GaugeKey is the key of an app gauge's selector in reports, made as
// ActivatorKey's: a report carries the key of the selector its pod was
// configured with, so that during a rollout to another gauge the
// autoscaler does not add values of two different series.
func GaugeKey(selector string) uint64 { return key(selector) }

// key is s's 64-bit FNV-1a hash, 1 for a hash of 0.
func key(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return max(h, 1)
}

// ContentType is the media type of a Report in binary form, version 1,
// which queue-proxies injected before version 2 serve, and serve still
// to a scraper that does not ask for version 2.
const ContentType = "application/vnd.swell.stats.v1"

// ContentTypeV2 is the media type of version 2: version 1's fields and the
// proxied figures by activator.
const ContentTypeV2 = "application/vnd.swell.stats.v2"

// ContentTypeV3 is the media type of version 3: version 2's fields and
// what the queue-proxy measured of the app (AppUsage).
const ContentTypeV3 = "application/vnd.swell.stats.v3"

// Version is the first byte of a version-1 binary Report. Any change to
// the layout gets a new version and a new content type (see
// docs/stats.md).
const Version = 1

// Version2 is the first byte of a version-2 binary Report.
const Version2 = 2

// Version3 is the first byte of a version-3 binary Report.
const Version3 = 3

// BinarySize is the length of a version-1 binary Report.
const BinarySize = 1 + 7*8

// shareSize is the length of one ActivatorShare in a version-2 Report.
const shareSize = 3 * 8

// appSize is the length of the AppUsage block that ends a version-3
// Report: a byte of flags (appCPU, appMemory, appGauge), then the CPU,
// the memory, the gauge's key and its value, 8 bytes each.
const appSize = 1 + 4*8

// The flags of the AppUsage block; the gauge's problem takes the bits
// from appProblemShift up.
const (
	appCPU          = 1 << 0
	appMemory       = 1 << 1
	appGauge        = 1 << 2
	appFlags        = appCPU | appMemory | appGauge
	appProblemShift = 3
)

// MaxBinarySize is the longest binary Report of any version: version 3
// with MaxActivatorShares shares.
const MaxBinarySize = BinarySize + 1 + MaxActivatorShares*shareSize + appSize

// Offsets of the fields in a version-1 binary Report; all little-endian.
const (
	offEnd         = 1  // int64 Unix nanoseconds, 0 = zero time.Time
	offPeriod      = 9  // int64 nanoseconds
	offConcurrency = 17 // float64 bits
	offProxiedConc = 25 // float64 bits
	offRequests    = 33 // uint64
	offProxiedReqs = 41 // uint64
	offUptime      = 49 // int64 nanoseconds
)

// ErrMalformed is wrapped by every error UnmarshalBinary, UnmarshalJSON and
// Validate return for input that is not a valid Report.
var ErrMalformed = errors.New("malformed stats report")

var (
	_ encoding.BinaryMarshaler   = Report{}
	_ encoding.BinaryUnmarshaler = (*Report)(nil)
	_ json.Unmarshaler           = (*Report)(nil)
)

// AppendBinary appends r's binary encoding (docs/stats.md) to b. It does not
// allocate when b has BinarySize bytes of spare capacity. It does not check
// r: use MarshalBinary or Validate to be sure the other side will accept it.
//
// End is written as Unix nanoseconds, so it must lie between the years 1678
// and 2262; the zero time.Time is written as 0 (and read back as the zero
// time.Time, which the Unix epoch itself therefore also becomes).
func (r Report) AppendBinary(b []byte) []byte {
	return r.appendFields(append(b, Version))
}

// AppendBinaryV2 appends r's version-2 binary encoding (docs/stats.md):
// version 1's fields, then the number of shares and each share. It does
// not allocate when b has MaxBinarySize bytes of spare capacity. Shares
// past MaxActivatorShares are left out.
func (r Report) AppendBinaryV2(b []byte) []byte {
	return r.appendShares(r.appendFields(append(b, Version2)))
}

// AppendBinaryV3 appends r's version-3 binary encoding (docs/stats.md):
// version 2's, then the AppUsage block. It does not allocate when b has
// MaxBinarySize bytes of spare capacity. A figure without its Has flag is
// written as 0.
func (r Report) AppendBinaryV3(b []byte) []byte {
	b = r.appendShares(r.appendFields(append(b, Version3)))
	a := r.App
	var flags byte
	var cpu, gauge float64
	var mem, gaugeKey uint64
	if a.HasCPU {
		flags, cpu = flags|appCPU, a.CPU
	}
	if a.HasMemory {
		flags, mem = flags|appMemory, a.Memory
	}
	if a.HasGauge {
		flags, gauge, gaugeKey = flags|appGauge, a.Gauge, a.GaugeKey
	} else {
		flags |= byte(a.GaugeProblem) << appProblemShift
	}
	le := binary.LittleEndian
	b = append(b, flags)
	b = le.AppendUint64(b, math.Float64bits(cpu))
	b = le.AppendUint64(b, mem)
	b = le.AppendUint64(b, gaugeKey)
	return le.AppendUint64(b, math.Float64bits(gauge))
}

// appendShares appends the number of shares and each share.
func (r Report) appendShares(b []byte) []byte {
	shares := r.ByActivator[:min(len(r.ByActivator), MaxActivatorShares)]
	b = append(b, byte(len(shares)))
	le := binary.LittleEndian
	for _, s := range shares {
		b = le.AppendUint64(b, s.Activator)
		b = le.AppendUint64(b, math.Float64bits(s.Concurrency))
		b = le.AppendUint64(b, s.Requests)
	}
	return b
}

// appendFields appends the fields both versions share, after the version.
func (r Report) appendFields(b []byte) []byte {
	var end int64
	if !r.End.IsZero() {
		end = r.End.UnixNano()
	}
	le := binary.LittleEndian
	b = le.AppendUint64(b, uint64(end))
	b = le.AppendUint64(b, uint64(r.Period))
	b = le.AppendUint64(b, math.Float64bits(r.Concurrency))
	b = le.AppendUint64(b, math.Float64bits(r.ProxiedConcurrency))
	b = le.AppendUint64(b, r.Requests)
	b = le.AppendUint64(b, r.ProxiedRequests)
	b = le.AppendUint64(b, uint64(r.Uptime))
	return b
}

// MarshalBinary returns r's binary encoding, or an error if r is not valid
// (Validate), so that nothing is sent that UnmarshalBinary would reject.
func (r Report) MarshalBinary() ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return r.AppendBinary(make([]byte, 0, BinarySize)), nil
}

// MarshalBinaryV2 is MarshalBinary in version 2.
func (r Report) MarshalBinaryV2() ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return r.AppendBinaryV2(make([]byte, 0, MaxBinarySize)), nil
}

// MarshalBinaryV3 is MarshalBinary in version 3.
func (r Report) MarshalBinaryV3() ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return r.AppendBinaryV3(make([]byte, 0, MaxBinarySize)), nil
}

// UnmarshalBinary decodes a Report encoded by AppendBinary or
// AppendBinaryV2. Any malformed input gives an error and leaves r
// unchanged: an unknown version, a length other than the version's, or
// fields that fail Validate. The shares of a version-2 report go into r's
// ByActivator, reusing its array, so that decoding into the same Report
// again and again does not allocate.
func (r *Report) UnmarshalBinary(b []byte) error {
	if len(b) == 0 {
		return fmt.Errorf("%w: empty input", ErrMalformed)
	}
	// The version is checked before the length: a newer, longer version must
	// be reported as such, not as trailing garbage.
	size := BinarySize
	switch b[0] {
	case Version:
	case Version2, Version3:
		size++ // the number of shares
		if len(b) > BinarySize {
			n := int(b[BinarySize])
			if n > MaxActivatorShares {
				return fmt.Errorf("%w: %d activator shares, at most %d", ErrMalformed, n, MaxActivatorShares)
			}
			size += n * shareSize
		}
		if b[0] == Version3 {
			size += appSize
		}
	default:
		return fmt.Errorf("%w: unknown version %d (this reader accepts versions %d, %s; %d, %s; and %d, %s)",
			ErrMalformed, b[0], Version, ContentType, Version2, ContentTypeV2, Version3, ContentTypeV3)
	}
	if len(b) < size {
		return fmt.Errorf("%w: short input: %d bytes, this version %d report is %d bytes", ErrMalformed, len(b), b[0], size)
	}
	if len(b) > size {
		return fmt.Errorf("%w: %d bytes of trailing garbage after a %d-byte report",
			ErrMalformed, len(b)-size, size)
	}
	le := binary.LittleEndian
	var d Report
	// The shares are decoded here and copied into r's array only once the
	// whole report is valid, so that a rejected one changes nothing.
	var shares [MaxActivatorShares]ActivatorShare
	n := 0
	sharesEnd := size
	if b[0] == Version3 {
		sharesEnd -= appSize
		i := sharesEnd
		flags := b[i]
		problem := GaugeProblem(flags >> appProblemShift)
		if problem >= NumGaugeProblems {
			return fmt.Errorf("%w: unknown gauge problem %d", ErrMalformed, problem)
		}
		d.App = AppUsage{
			CPU:       math.Float64frombits(le.Uint64(b[i+1:])),
			HasCPU:    flags&appCPU != 0,
			Memory:    le.Uint64(b[i+9:]),
			HasMemory: flags&appMemory != 0,
			GaugeKey:  le.Uint64(b[i+17:]),
			Gauge:     math.Float64frombits(le.Uint64(b[i+25:])),
			HasGauge:  flags&appGauge != 0,
			// Set only without a gauge: validate refuses it beside one.
			GaugeProblem: problem,
		}
	}
	if b[0] != Version {
		d.Attributed = true
		for i := BinarySize + 1; i < sharesEnd; i += shareSize {
			shares[n] = ActivatorShare{
				Activator:   le.Uint64(b[i:]),
				Concurrency: math.Float64frombits(le.Uint64(b[i+8:])),
				Requests:    le.Uint64(b[i+16:]),
			}
			n++
		}
	}
	if end := int64(le.Uint64(b[offEnd:])); end != 0 {
		d.End = time.Unix(0, end).UTC()
	}
	d.Period = time.Duration(le.Uint64(b[offPeriod:]))
	d.Concurrency = math.Float64frombits(le.Uint64(b[offConcurrency:]))
	d.ProxiedConcurrency = math.Float64frombits(le.Uint64(b[offProxiedConc:]))
	d.Requests = le.Uint64(b[offRequests:])
	d.ProxiedRequests = le.Uint64(b[offProxiedReqs:])
	d.Uptime = time.Duration(le.Uint64(b[offUptime:]))
	if err := d.Validate(); err != nil {
		return err
	}
	if err := validateShares(&shares, n, d.ProxiedConcurrency, d.ProxiedRequests); err != nil {
		return err
	}
	d.ByActivator = append(r.ByActivator[:0], shares[:n]...)
	*r = d
	return nil
}

// UnmarshalJSON decodes the JSON form of a Report (absent fields are zero)
// and checks it with Validate; on error r is unchanged.
func (r *Report) UnmarshalJSON(b []byte) error {
	type plain Report // plain has no methods, so this does not recurse
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if err := Report(p).Validate(); err != nil {
		return err
	}
	*r = Report(p)
	return nil
}

// Validate reports the first field that no Tracker could have produced:
// negative durations, concurrencies that are negative, NaN or infinite, and
// proxied figures above their totals.
func (r Report) Validate() error {
	switch {
	case r.Period < 0:
		return fmt.Errorf("%w: negative period %v", ErrMalformed, r.Period)
	case r.Uptime < 0:
		return fmt.Errorf("%w: negative uptime %v", ErrMalformed, r.Uptime)
	case !validConcurrency(r.Concurrency):
		return fmt.Errorf("%w: concurrency %v is not a finite number >= 0", ErrMalformed, r.Concurrency)
	case !validConcurrency(r.ProxiedConcurrency):
		return fmt.Errorf("%w: proxied concurrency %v is not a finite number >= 0", ErrMalformed, r.ProxiedConcurrency)
	case r.ProxiedConcurrency > r.Concurrency:
		return fmt.Errorf("%w: proxied concurrency %v above concurrency %v", ErrMalformed, r.ProxiedConcurrency, r.Concurrency)
	case r.ProxiedRequests > r.Requests:
		return fmt.Errorf("%w: %d proxied requests above %d requests", ErrMalformed, r.ProxiedRequests, r.Requests)
	case len(r.ByActivator) > MaxActivatorShares:
		return fmt.Errorf("%w: %d activator shares, at most %d", ErrMalformed, len(r.ByActivator), MaxActivatorShares)
	case len(r.ByActivator) > 0 && !r.Attributed:
		return fmt.Errorf("%w: activator shares in a report not marked attributed", ErrMalformed)
	}
	if err := r.App.validate(); err != nil {
		return err
	}
	var shares [MaxActivatorShares]ActivatorShare
	n := copy(shares[:], r.ByActivator)
	return validateShares(&shares, n, r.ProxiedConcurrency, r.ProxiedRequests)
}

// validateShares checks the first n shares against the proxied figures.
// It takes an array so that a caller's shares stay on its stack.
func validateShares(shares *[MaxActivatorShares]ActivatorShare, n int, proxiedConc float64, proxiedReqs uint64) error {
	var conc float64
	var reqs uint64
	for i, s := range shares[:n] {
		switch {
		case s.Activator == 0:
			return fmt.Errorf("%w: activator share %d has key 0", ErrMalformed, i)
		case !validConcurrency(s.Concurrency):
			return fmt.Errorf("%w: activator share %d: concurrency %v is not a finite number >= 0", ErrMalformed, i, s.Concurrency)
		case s.Requests > proxiedReqs-reqs:
			return fmt.Errorf("%w: activator shares add up to more than %d proxied requests", ErrMalformed, proxiedReqs)
		}
		for _, o := range shares[:i] {
			if o.Activator == s.Activator {
				return fmt.Errorf("%w: activator %x has two shares", ErrMalformed, s.Activator)
			}
		}
		conc += s.Concurrency
		reqs += s.Requests
	}
	// The shares are summed in another order than the Tracker summed the
	// total: a rounding's worth above it is fine.
	if conc > proxiedConc*(1+1e-9)+1e-9 {
		return fmt.Errorf("%w: activator shares add up to concurrency %v, above the proxied %v", ErrMalformed, conc, proxiedConc)
	}
	return nil
}

// validate reports a figure no queue-proxy could have measured: negative,
// NaN or infinite, a figure without its flag, a gauge without its key.
func (a AppUsage) validate() error {
	switch {
	case !validConcurrency(a.CPU):
		return fmt.Errorf("%w: app CPU %v is not a finite number >= 0", ErrMalformed, a.CPU)
	case !validConcurrency(a.Gauge):
		return fmt.Errorf("%w: app gauge %v is not a finite number >= 0", ErrMalformed, a.Gauge)
	case !a.HasCPU && math.Float64bits(a.CPU) != 0, !a.HasMemory && a.Memory != 0,
		!a.HasGauge && (math.Float64bits(a.Gauge) != 0 || a.GaugeKey != 0):
		return fmt.Errorf("%w: an app figure without its flag", ErrMalformed)
	case a.HasGauge && a.GaugeKey == 0:
		return fmt.Errorf("%w: an app gauge with key 0", ErrMalformed)
	case a.GaugeProblem >= NumGaugeProblems:
		return fmt.Errorf("%w: unknown gauge problem %d", ErrMalformed, a.GaugeProblem)
	case a.HasGauge && a.GaugeProblem != GaugeOK:
		return fmt.Errorf("%w: an app gauge with a problem", ErrMalformed)
	}
	return nil
}

func validConcurrency(c float64) bool { return c >= 0 && !math.IsInf(c, 1) } // NaN fails c >= 0

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
}

// ContentType is the media type of a Report in binary form.
const ContentType = "application/vnd.swell.stats.v1"

// Version is the first byte of every binary Report this package writes, and
// the only one it reads. Any change to the layout gets a new version and a
// new ContentType (see docs/stats.md).
const Version = 1

// BinarySize is the length of a version-1 binary Report.
const BinarySize = 1 + 7*8

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
	var end int64
	if !r.End.IsZero() {
		end = r.End.UnixNano()
	}
	le := binary.LittleEndian
	b = append(b, Version)
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

// UnmarshalBinary decodes a Report encoded by AppendBinary. Any malformed
// input gives an error and leaves r unchanged: a version other than Version,
// a length other than BinarySize, or fields that fail Validate. It does not
// allocate on success.
func (r *Report) UnmarshalBinary(b []byte) error {
	if len(b) == 0 {
		return fmt.Errorf("%w: empty input", ErrMalformed)
	}
	// The version is checked before the length: a newer, longer version must
	// be reported as such, not as trailing garbage.
	if b[0] != Version {
		return fmt.Errorf("%w: unknown version %d (this reader accepts version %d, %s)",
			ErrMalformed, b[0], Version, ContentType)
	}
	if len(b) < BinarySize {
		return fmt.Errorf("%w: short input: %d bytes, version %d is %d bytes", ErrMalformed, len(b), Version, BinarySize)
	}
	if len(b) > BinarySize {
		return fmt.Errorf("%w: %d bytes of trailing garbage after a %d-byte report",
			ErrMalformed, len(b)-BinarySize, BinarySize)
	}
	le := binary.LittleEndian
	var d Report
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
	}
	return nil
}

func validConcurrency(c float64) bool { return c >= 0 && !math.IsInf(c, 1) } // NaN fails c >= 0

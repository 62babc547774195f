package stats

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/swell-run/swell/pkg/service"
)

// The activator → autoscaler messages: binary websocket frames the activator
// sends over one long-lived connection (docs/collector.md has the layout and
// the protocol around it).
//
// Every frame starts with ActivatorVersion and a frame type. A Hello names
// the activator once per connection, so that the autoscaler sums the figures
// of several activators rather than letting one overwrite another; a Report
// carries one period's figures for any number of services; a Poke says a
// request just arrived for a service that has no pods.
//
// Entries hold variable-length service keys, so the layout cannot be fixed
// width like Report's; counts are unsigned varints (most fit in one or two
// bytes), which keeps a report of ten thousand services within a few hundred
// kilobytes.

// ActivatorVersion is the first byte of every activator frame, and the only
// one DecodeActivatorFrame accepts. A change to any layout is a new version.
const ActivatorVersion = 1

// ActivatorMaxFrameSize is the largest frame an activator may send and the
// autoscaler's default read limit: an activator splits a larger report into
// several Report frames of the same End and Period.
const ActivatorMaxFrameSize = 256 << 10

// Sizes of the fixed parts of activator frames.
const (
	// ActivatorReportHeaderSize is the size of a Report frame with no entry.
	ActivatorReportHeaderSize = 2 + 8 + 8
	// ActivatorMaxEntrySize bounds the encoded size of one Report entry:
	// length byte, the longest service key, concurrency and two varints.
	ActivatorMaxEntrySize = 1 + service.MaxLen + 8 + 2*binary.MaxVarintLen64
)

// ActivatorFrameType says what an activator frame carries.
type ActivatorFrameType uint8

// The activator frame types.
const (
	// ActivatorHello names the activator (its pod name); it is the first
	// frame of every connection and only that.
	ActivatorHello ActivatorFrameType = 1
	// ActivatorReport carries one period's figures for zero or more services.
	ActivatorReport ActivatorFrameType = 2
	// ActivatorPoke names one or more services for which a request arrived
	// while they had no pod.
	ActivatorPoke ActivatorFrameType = 3
)

func (t ActivatorFrameType) String() string {
	switch t {
	case ActivatorHello:
		return "hello"
	case ActivatorReport:
		return "report"
	case ActivatorPoke:
		return "poke"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// ActivatorFigures is one service's load at one activator over a period.
type ActivatorFigures struct {
	// Concurrency is the time-weighted average number of the service's
	// requests the activator held (queued or being proxied) over the period.
	Concurrency float64
	// Requests is the number of the service's requests that arrived at the
	// activator in the period.
	Requests uint64
	// InFlight is the number of the service's requests the activator held
	// at the end of the period (the scale-to-zero gate reads it).
	InFlight uint64
}

// ActivatorEntry is one service in a decoded Report or Poke frame.
type ActivatorEntry struct {
	// Service is "namespace/name". It aliases the decoded frame's bytes.
	Service []byte
	// ActivatorFigures is zero in a Poke.
	ActivatorFigures
}

// ActivatorFrame is a decoded activator frame. Byte slices in it alias the
// input of DecodeActivatorFrame: they are valid only as long as that buffer
// is not reused, and a receiver that keeps one must copy it.
type ActivatorFrame struct {
	Type ActivatorFrameType
	// Activator is the activator's name (Hello only).
	Activator []byte
	// End and Period are the reporting period (Report only): it ended at End
	// on the activator's clock and lasted Period.
	End    time.Time
	Period time.Duration
	// Entries are the services of a Report or a Poke.
	Entries []ActivatorEntry
}

// AppendActivatorHello appends a Hello frame naming activator. Like the
// other Append functions it does not validate: use ValidateActivatorName
// first, or the autoscaler closes the connection.
func AppendActivatorHello(b []byte, activator string) []byte {
	b = append(b, ActivatorVersion, byte(ActivatorHello), byte(len(activator)))
	return append(b, activator...)
}

// AppendActivatorReportHeader appends the start of a Report frame for the
// period that ended at end and lasted period; AppendActivatorEntry then
// appends its entries, which run to the end of the frame. An empty Report is
// a valid heartbeat.
func AppendActivatorReportHeader(b []byte, end time.Time, period time.Duration) []byte {
	var e int64
	if !end.IsZero() {
		e = end.UnixNano()
	}
	b = append(b, ActivatorVersion, byte(ActivatorReport))
	b = binary.LittleEndian.AppendUint64(b, uint64(e))
	return binary.LittleEndian.AppendUint64(b, uint64(period))
}

// AppendActivatorEntry appends one service's figures to a Report frame
// started by AppendActivatorReportHeader. It appends at most
// ActivatorMaxEntrySize bytes, so a writer can split its report into frames
// of at most ActivatorMaxFrameSize without trial encoding.
func AppendActivatorEntry(b []byte, service string, f ActivatorFigures) []byte {
	b = append(b, byte(len(service)))
	b = append(b, service...)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f.Concurrency))
	b = binary.AppendUvarint(b, f.Requests)
	return binary.AppendUvarint(b, f.InFlight)
}

// AppendActivatorPoke appends a Poke frame naming services (at least one).
func AppendActivatorPoke(b []byte, services ...string) []byte {
	b = append(b, ActivatorVersion, byte(ActivatorPoke))
	for _, s := range services {
		b = append(b, byte(len(s)))
		b = append(b, s...)
	}
	return b
}

// DecodeActivatorFrame decodes one activator frame into f, reusing the
// capacity of f.Entries: decoding into a frame that has held a frame as
// large does not allocate. The frame is validated whole — version, type,
// lengths, every service key, every number — before DecodeActivatorFrame
// returns nil, so a caller applies nothing from a broken frame. On error f
// is reset (Type 0, no entries) and the error wraps ErrMalformed and says
// what was wrong and where.
//
// f's byte slices alias b.
func DecodeActivatorFrame(b []byte, f *ActivatorFrame) error {
	entries := f.Entries[:0]
	*f = ActivatorFrame{Entries: entries}
	if err := decodeActivatorFrame(b, f); err != nil {
		*f = ActivatorFrame{Entries: f.Entries[:0]}
		return err
	}
	return nil
}

func decodeActivatorFrame(b []byte, f *ActivatorFrame) error {
	if len(b) < 2 {
		return fmt.Errorf("%w: activator frame of %d bytes, shorter than its 2-byte header", ErrMalformed, len(b))
	}
	if b[0] != ActivatorVersion {
		return fmt.Errorf("%w: unknown activator frame version %d (this reader accepts version %d)",
			ErrMalformed, b[0], ActivatorVersion)
	}
	f.Type = ActivatorFrameType(b[1])
	switch f.Type {
	case ActivatorHello:
		name, off, err := lengthPrefixed(b, 2)
		if err != nil {
			return fmt.Errorf("%w: hello: activator name: %w", ErrMalformed, err)
		}
		if off != len(b) {
			return fmt.Errorf("%w: hello: %d bytes of trailing garbage after the activator name", ErrMalformed, len(b)-off)
		}
		if err := validName(name); err != nil {
			return fmt.Errorf("%w: hello: activator name %q: %w", ErrMalformed, name, err)
		}
		f.Activator = name
		return nil
	case ActivatorReport:
		return decodeReport(b, f)
	case ActivatorPoke:
		if len(b) == 2 {
			return fmt.Errorf("%w: poke names no service", ErrMalformed)
		}
		for off, i := 2, 0; off < len(b); i++ {
			svc, next, err := lengthPrefixed(b, off)
			if err == nil {
				err = service.Check(svc)
			}
			if err != nil {
				return fmt.Errorf("%w: poke entry %d at byte %d: service: %w", ErrMalformed, i, off, err)
			}
			f.Entries = append(f.Entries, ActivatorEntry{Service: svc})
			off = next
		}
		return nil
	}
	return fmt.Errorf("%w: unknown activator frame type %d (known: 1 hello, 2 report, 3 poke)", ErrMalformed, b[1])
}

func decodeReport(b []byte, f *ActivatorFrame) error {
	if len(b) < ActivatorReportHeaderSize {
		return fmt.Errorf("%w: report of %d bytes, shorter than its %d-byte header",
			ErrMalformed, len(b), ActivatorReportHeaderSize)
	}
	le := binary.LittleEndian
	if end := int64(le.Uint64(b[2:])); end != 0 {
		f.End = time.Unix(0, end).UTC()
	}
	f.Period = time.Duration(le.Uint64(b[10:]))
	if f.Period < 0 {
		return fmt.Errorf("%w: report: negative period %v", ErrMalformed, f.Period)
	}
	for off, i := ActivatorReportHeaderSize, 0; off < len(b); i++ {
		e, next, err := decodeEntry(b, off)
		if err != nil {
			return fmt.Errorf("%w: report entry %d at byte %d: %w", ErrMalformed, i, off, err)
		}
		f.Entries = append(f.Entries, e)
		off = next
	}
	return nil
}

func decodeEntry(b []byte, off int) (ActivatorEntry, int, error) {
	var e ActivatorEntry
	svc, off, err := lengthPrefixed(b, off)
	if err == nil {
		err = service.Check(svc)
	}
	if err != nil {
		return e, 0, fmt.Errorf("service: %w", err)
	}
	e.Service = svc
	if len(b)-off < 8 {
		return e, 0, fmt.Errorf("service %q: concurrency: %d bytes left, need 8", svc, len(b)-off)
	}
	e.Concurrency = math.Float64frombits(binary.LittleEndian.Uint64(b[off:]))
	if !validConcurrency(e.Concurrency) {
		return e, 0, fmt.Errorf("service %q: concurrency %v is not a finite number >= 0", svc, e.Concurrency)
	}
	off += 8
	if e.Requests, off, err = uvarint(b, off); err != nil {
		return e, 0, fmt.Errorf("service %q: requests: %w", svc, err)
	}
	if e.InFlight, off, err = uvarint(b, off); err != nil {
		return e, 0, fmt.Errorf("service %q: in flight: %w", svc, err)
	}
	return e, off, nil
}

// lengthPrefixed reads a one-byte length and that many bytes at off. The
// returned slice's capacity ends with it, so an append by the receiver can
// never overwrite the rest of the frame.
func lengthPrefixed(b []byte, off int) ([]byte, int, error) {
	if off >= len(b) {
		return nil, 0, fmt.Errorf("missing length byte")
	}
	n := int(b[off])
	off++
	if n == 0 {
		return nil, 0, fmt.Errorf("empty")
	}
	if len(b)-off < n {
		return nil, 0, fmt.Errorf("length %d, but only %d bytes left", n, len(b)-off)
	}
	return b[off : off+n : off+n], off + n, nil
}

// uvarint reads a minimally encoded unsigned varint, so that every value has
// exactly one encoding and an accepted frame re-encodes to the same bytes.
func uvarint(b []byte, off int) (uint64, int, error) {
	v, n := binary.Uvarint(b[off:])
	switch {
	case n == 0:
		return 0, 0, fmt.Errorf("truncated varint")
	case n < 0:
		return 0, 0, fmt.Errorf("varint overflows 64 bits")
	case n > 1 && b[off+n-1] == 0:
		return 0, 0, fmt.Errorf("varint not minimally encoded")
	}
	return v, off + n, nil
}

// Limits of the names in activator frames.
const (
	// MaxActivatorNameLen is the longest activator name: a DNS subdomain,
	// as a Kubernetes pod name is.
	MaxActivatorNameLen = 253
)

// ValidateActivatorName reports whether s can name an activator in a Hello:
// a DNS subdomain of at most 253 characters (lower-case letters, digits, '-'
// and '.', starting and ending with a letter or digit), as a pod name is.
func ValidateActivatorName(s string) error {
	if err := validName(s); err != nil {
		return fmt.Errorf("activator name %q: %w", s, err)
	}
	return nil
}

func validName[T ~string | ~[]byte](s T) error {
	if len(s) == 0 || len(s) > MaxActivatorNameLen {
		return fmt.Errorf("%d characters, want 1 to %d", len(s), MaxActivatorNameLen)
	}
	for i := 0; i < len(s); i++ {
		if !lowerAlnum(s[i]) && s[i] != '-' && s[i] != '.' {
			return fmt.Errorf("character %q at %d (want a-z, 0-9, '-', '.')", s[i], i)
		}
	}
	if !lowerAlnum(s[0]) || !lowerAlnum(s[len(s)-1]) {
		return fmt.Errorf("must start and end with a letter or digit")
	}
	return nil
}

func lowerAlnum(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }

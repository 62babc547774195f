package collector

import (
	"bytes"
	"errors"
	"fmt"
)

// maxHead bounds a stats response's status line and header fields, the
// blank line that ends them included. A queue-proxy's take about 160
// bytes, and a mesh proxy in between adds a few hundred; a longer head is
// a pod wasting the autoscaler's time. (net/http's client allows 10 MB.)
const maxHead = 4 << 10

// responseHead is what a scrape reads of a response's status line and
// header fields. Its byte slices alias the buffer it was parsed from.
type responseHead struct {
	// status is the status code; reason the reason phrase.
	status int
	reason []byte
	// contentLength is the Content-Length, -1 for none; lengthText as
	// sent.
	contentLength int
	lengthText    []byte
	// contentType is the Content-Type's value; nil for none.
	contentType []byte
	// transferEncoding says a Transfer-Encoding was sent: the body's
	// length is not the Content-Length.
	transferEncoding bool
	// close says the connection ends after this response: HTTP/1.0, or
	// "Connection: close".
	close bool
}

// errHeadTooLarge fails a response whose head is longer than maxHead.
var errHeadTooLarge = fmt.Errorf("response head longer than %d bytes", maxHead)

// headEnd returns the length of the head at the start of b, the final
// blank line included, or 0 if b holds no whole head yet. from is how much
// of b an earlier call searched: a head arriving a byte at a time is not
// searched again from its start each time.
func headEnd(b []byte, from int) int {
	from = max(from-3, 0)
	if i := bytes.Index(b[from:], []byte("\r\n\r\n")); i >= 0 {
		return from + i + 4
	}
	return 0
}

// parseHead parses head, a response's status line and header fields up to
// and including the blank line that ends them (headEnd's length). It is
// strict where leniency could let a pod smuggle a body or a second
// response past the scraper: lines end with CRLF, field names are tokens
// right before their colon, no field is folded, no value holds a control
// character, and a Content-Length is digits, the same every time it is
// sent. Fields the scraper does not use are checked and skipped.
func parseHead(head []byte) (responseHead, error) {
	h := responseHead{contentLength: -1}
	if len(head) > maxHead {
		return h, errHeadTooLarge
	}
	if !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
		return h, errors.New("response head does not end with a blank line")
	}
	line, rest, _ := bytes.Cut(head[:len(head)-2], []byte("\r\n"))
	if err := h.parseStatusLine(line); err != nil {
		return h, err
	}
	for len(rest) > 0 {
		line, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		if err := h.parseField(line); err != nil {
			return h, err
		}
	}
	return h, nil
}

// parseStatusLine parses "HTTP/1.1 200 OK"; the reason phrase may be
// empty, and so may the space before it.
func (h *responseHead) parseStatusLine(line []byte) error {
	var ok bool
	switch {
	case bytes.HasPrefix(line, []byte("HTTP/1.1 ")):
	case bytes.HasPrefix(line, []byte("HTTP/1.0 ")):
		h.close = true
	default:
		return fmt.Errorf("status line %q: not HTTP/1.1", clip(line))
	}
	code := line[len("HTTP/1.1 "):]
	if len(code) > 3 {
		code, h.reason, ok = code[:3], code[4:], code[3] == ' '
		if !ok {
			return fmt.Errorf("status line %q: malformed status code", clip(line))
		}
	}
	if len(code) != 3 || !isDigit(code[0]) || code[0] == '0' || !isDigit(code[1]) || !isDigit(code[2]) {
		return fmt.Errorf("status line %q: malformed status code", clip(line))
	}
	h.status = int(code[0]-'0')*100 + int(code[1]-'0')*10 + int(code[2]-'0')
	if hasControl(h.reason) {
		return fmt.Errorf("status line %q: control character in the reason phrase", clip(line))
	}
	return nil
}

// parseField parses one header field line and keeps what the scraper
// uses.
func (h *responseHead) parseField(line []byte) error {
	name, value, ok := bytes.Cut(line, []byte(":"))
	if !ok || !isToken(name) {
		// A line starting with a space or tab (obsolete folding) lands
		// here too: a space is not a token character.
		return fmt.Errorf("header line %q: not a field name and a colon", clip(line))
	}
	value = bytes.Trim(value, " \t")
	if hasControl(value) {
		return fmt.Errorf("header %s: control character in the value", clip(name))
	}
	switch {
	case bytes.EqualFold(name, []byte("Content-Length")):
		n, ok := parseLength(value)
		if !ok {
			return fmt.Errorf("header Content-Length %q: not a length", clip(value))
		}
		// Sent twice, it must be the same text twice, as net/http has it.
		if h.lengthText != nil && !bytes.Equal(h.lengthText, value) {
			return fmt.Errorf("header Content-Length: %s and %s", h.lengthText, value)
		}
		h.contentLength, h.lengthText = n, value
	case bytes.EqualFold(name, []byte("Content-Type")):
		if h.contentType != nil {
			return errors.New("header Content-Type: sent twice")
		}
		h.contentType = value
	case bytes.EqualFold(name, []byte("Transfer-Encoding")):
		h.transferEncoding = true
	case bytes.EqualFold(name, []byte("Connection")):
		for tok := range bytes.SplitSeq(value, []byte(",")) {
			if bytes.EqualFold(bytes.Trim(tok, " \t"), []byte("close")) {
				h.close = true
			}
		}
	}
	return nil
}

// maxLengthDigits bounds a Content-Length's digits: far more than any
// stats report needs, and no overflow.
const maxLengthDigits = 9

// parseLength parses a Content-Length: 1 to maxLengthDigits digits.
func parseLength(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > maxLengthDigits {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// hasControl says whether b holds a control character other than a tab,
// which has no place in a field value or a reason phrase (RFC 9110 5.5).
func hasControl(b []byte) bool {
	for _, c := range b {
		if c < ' ' && c != '\t' || c == 0x7f {
			return true
		}
	}
	return false
}

// isToken says whether b is a token (RFC 9110 5.6.2), as a field name is.
func isToken(b []byte) bool {
	for _, c := range b {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), c) >= 0:
		default:
			return false
		}
	}
	return len(b) > 0
}

// clip shortens what a pod sent for an error message: a pod decides what
// its responses hold, and a log line should not.
func clip(b []byte) []byte {
	const most = 64
	if len(b) > most {
		return b[:most]
	}
	return b
}

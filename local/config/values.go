package config

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/swell-run/swell/pkg/autoscaling"
	"github.com/swell-run/swell/pkg/network"
)

const (
	maxNameLen = 63

	acceptedName    = "lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters, e.g. hello-app"
	acceptedCount   = "an integer ≥ 0"
	acceptedTimeout = "a duration from 1s to 1h, e.g. 30s or 5m (0: the default, 5m)"
	acceptedEnv     = "KEY=VALUE, KEY not empty and without '='"
	acceptedHost    = "a host name, optionally with a port, e.g. hello.localhost or hello.localhost:8080 (no scheme, no path)"
)

// checkName returns what is wrong with a service name, or "".
func checkName(s string) string {
	switch {
	case s == "":
		return "is empty"
	case len(s) > maxNameLen:
		return "is longer than 63 characters"
	case !isLabel(s):
		return "is not a valid name"
	}
	return ""
}

// isLabel reports whether s is [a-z0-9]([-a-z0-9]*[a-z0-9])?.
func isLabel(s string) bool {
	if s == "" || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// nameFromCommand derives a service name from a command's program:
// "./bin/Hello_App" gives "hello-app". Every run of characters a name
// cannot hold becomes one '-'.
func nameFromCommand(program string) string {
	base := program
	if i := strings.LastIndexAny(base, `/\`); i >= 0 {
		base = base[i+1:]
	}
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(base) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
			continue
		}
		dash = true
	}
	name := b.String()
	if len(name) > maxNameLen {
		name = strings.TrimRight(name[:maxNameLen], "-")
	}
	if name == "" {
		return "service"
	}
	return name
}

// parseCount reads a non-negative integer (containerConcurrency,
// queueDepth).
func parseCount(text string) (int, *autoscaling.Error) {
	v, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
	switch {
	case err != nil && err.(*strconv.NumError).Err == strconv.ErrRange, err == nil && (v < 0 || v > math.MaxInt32):
		return 0, badValue(text, "is out of range", acceptedCount)
	case err != nil:
		return 0, badValue(text, "is not an integer", acceptedCount)
	}
	return int(v), nil
}

// parseTimeout reads a request timeout: 0, or from network.RequestTimeoutMin to
// network.RequestTimeoutMax.
func parseTimeout(text string) (time.Duration, *autoscaling.Error) {
	d, err := time.ParseDuration(strings.TrimSpace(text))
	switch {
	case err != nil:
		return 0, badValue(text, "is not a duration", acceptedTimeout)
	case d != 0 && (d < network.RequestTimeoutMin || d > network.RequestTimeoutMax):
		return 0, badValue(text, "is out of range", acceptedTimeout)
	}
	return d, nil
}

// checkEnv returns what is wrong with one environment variable, or "".
func checkEnv(key, value string) string {
	switch {
	case key == "":
		return "has an empty KEY"
	case strings.Contains(key, "="):
		return "has '=' in its KEY"
	case strings.ContainsRune(key, 0) || strings.ContainsRune(value, 0):
		return "contains a NUL byte"
	case key == "PORT":
		return "sets PORT, which swell sets to each replica's own port"
	}
	return ""
}

// normalizeHost lowercases a host name and returns what is wrong with it,
// if anything.
func normalizeHost(s string) (string, string) {
	h := strings.ToLower(s)
	switch {
	case h == "":
		return "", "is empty"
	case strings.Contains(h, "://"):
		return "", "has a scheme"
	case strings.ContainsAny(h, "/?#"):
		return "", "has a path"
	}
	name := h
	if i := strings.LastIndexByte(h, ':'); i >= 0 {
		name = h[:i]
		port, err := strconv.Atoi(h[i+1:])
		if err != nil || port < 1 || port > 65535 || h[i+1] == '+' || h[i+1] == '0' {
			return "", "has an invalid port"
		}
	}
	if len(name) > 253 {
		return "", "is longer than 253 characters"
	}
	for label := range strings.SplitSeq(strings.TrimSuffix(name, "."), ".") {
		if len(label) > maxNameLen || !isLabel(label) {
			return "", "is not a valid host name"
		}
	}
	return h, ""
}

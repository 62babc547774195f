// Package service names a Swell service: the Key by which every component,
// every wire format and every log line identifies it, with its one grammar.
package service

import (
	"cmp"
	"fmt"
	"strings"
)

// MaxLen is the length of the longest key in its text form: two DNS labels
// and a slash.
const MaxLen = 63 + 1 + 63

// Key identifies a service by namespace and name: on Kubernetes the
// Deployment's, in `swell local` "local" and the service's name. It is
// comparable, so it is used directly as a map key.
//
// A Key made by Parse or New is valid; the zero Key is not.
type Key struct {
	Namespace, Name string
}

// String returns "namespace/name", the form of logs, events, the
// Swell-Service header and the activators' reports.
func (k Key) String() string { return k.Namespace + "/" + k.Name }

// Compare orders keys by namespace, then name: -1, 0 or +1, for
// slices.SortFunc.
func (k Key) Compare(o Key) int {
	return cmp.Or(cmp.Compare(k.Namespace, o.Namespace), cmp.Compare(k.Name, o.Name))
}

// IsZero reports whether k is the zero Key.
func (k Key) IsZero() bool { return k == Key{} }

// Accepted says what a key may be, for error messages.
const Accepted = "namespace/name, each 1 to 63 lower-case letters, digits and '-', starting and ending with a letter or digit"

// Parse parses "namespace/name": exactly one slash between two RFC 1123
// DNS labels, as Kubernetes requires of namespaces and as Swell requires of
// the names of the services it scales. Data enters Swell through Parse (a
// header, a report frame, a query) or New (an object's namespace and name)
// once; past that, a Key is passed as it is.
func Parse(s string) (Key, error) {
	if err := Check(s); err != nil {
		return Key{}, err
	}
	ns, name, _ := strings.Cut(s, "/")
	return Key{Namespace: ns, Name: name}, nil
}

// New returns the key of name in namespace, or an error if either is not a
// DNS label.
func New(namespace, name string) (Key, error) {
	if err := label(namespace); err != nil {
		return Key{}, fmt.Errorf("service key %q: namespace: %w; accepted: %s", namespace+"/"+name, err, Accepted)
	}
	if err := label(name); err != nil {
		return Key{}, fmt.Errorf("service key %q: name: %w; accepted: %s", namespace+"/"+name, err, Accepted)
	}
	return Key{Namespace: namespace, Name: name}, nil
}

// Check reports whether s, a string or the bytes of a wire frame, is a key
// Parse accepts. It does not allocate unless s is invalid.
func Check[T ~string | ~[]byte](s T) error {
	err := check(s)
	if err == nil {
		return nil
	}
	// Apart, so that the common case stays small enough to inline.
	return checkError(string(s), err)
}

func checkError(s string, err error) error {
	return fmt.Errorf("service key %q: %w; accepted: %s", s, err, Accepted)
}

func check[T ~string | ~[]byte](s T) error {
	slash := -1
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			if slash >= 0 {
				return fmt.Errorf("more than one '/'")
			}
			slash = i
		}
	}
	if slash < 0 {
		return fmt.Errorf("no '/'")
	}
	if err := label(s[:slash]); err != nil {
		return fmt.Errorf("namespace: %w", err)
	}
	if err := label(s[slash+1:]); err != nil {
		return fmt.Errorf("name: %w", err)
	}
	return nil
}

// label reports whether s is an RFC 1123 DNS label.
func label[T ~string | ~[]byte](s T) error {
	if len(s) == 0 || len(s) > 63 {
		return fmt.Errorf("%d characters, want 1 to 63", len(s))
	}
	for i := 0; i < len(s); i++ {
		if !lowerAlnum(s[i]) && s[i] != '-' {
			return fmt.Errorf("character %q at %d", s[i], i)
		}
	}
	if !lowerAlnum(s[0]) || !lowerAlnum(s[len(s)-1]) {
		return fmt.Errorf("does not start and end with a letter or digit")
	}
	return nil
}

func lowerAlnum(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }

package service

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	long := strings.Repeat("a", 63)
	for _, tc := range []struct {
		in   string
		want Key
		err  string // a part of the error; "" for none
	}{
		{"default/hello", Key{"default", "hello"}, ""},
		{"a/b", Key{"a", "b"}, ""},
		{"ns-1/0app", Key{"ns-1", "0app"}, ""},
		{long + "/" + long, Key{long, long}, ""},
		{"hello", Key{}, "no '/'"},
		{"/hello", Key{}, "namespace: 0 characters"},
		{"default/", Key{}, "name: 0 characters"},
		{"a/b/c", Key{}, "more than one '/'"},
		{"", Key{}, "no '/'"},
		{"Default/hello", Key{}, "namespace: character 'D'"},
		{"default/my.app", Key{}, "name: character '.'"},
		{"default/-app", Key{}, "does not start and end"},
		{"default/" + long + "a", Key{}, "64 characters"},
	} {
		got, err := Parse(tc.in)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("Parse(%q): %v", tc.in, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "accepted: namespace/name")):
			t.Errorf("Parse(%q) error = %v, want one containing %q and what is accepted", tc.in, err, tc.err)
		case got != tc.want:
			t.Errorf("Parse(%q) = %v, want %v", tc.in, got, tc.want)
		}
		if tc.err == "" && got.String() != tc.in {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tc.in)
		}
		if cerr := Check([]byte(tc.in)); (cerr == nil) != (err == nil) {
			t.Errorf("Check(%q) = %v, Parse's error %v", tc.in, cerr, err)
		}
		if ns, name, ok := strings.Cut(tc.in, "/"); ok && !strings.Contains(name, "/") {
			k, nerr := New(ns, name)
			if (nerr == nil) != (err == nil) || k != got {
				t.Errorf("New(%q, %q) = %v, %v; Parse gives %v, %v", ns, name, k, nerr, got, err)
			}
		}
	}
	if !(Key{}).IsZero() || (Key{"a", "b"}).IsZero() {
		t.Error("IsZero")
	}
}

func TestCheckDoesNotAllocate(t *testing.T) {
	b := []byte("default/hello")
	if n := testing.AllocsPerRun(100, func() { _ = Check(b) }); n != 0 {
		t.Errorf("Check allocates %v times for a valid key", n)
	}
}

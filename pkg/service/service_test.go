package service

import "testing"

func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Key
		ok   bool
	}{
		{"default/hello", Key{"default", "hello"}, true},
		{"a/b", Key{"a", "b"}, true},
		{"hello", Key{}, false},
		{"/hello", Key{}, false},
		{"default/", Key{}, false},
		{"a/b/c", Key{}, false},
		{"", Key{}, false},
	} {
		got, err := ParseKey(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseKey(%q) = %v, %v; want %v, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if tc.ok && got.String() != tc.in {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tc.in)
		}
	}
}

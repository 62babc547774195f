package decider

import "unsafe"

// unsafeStringData tells whether two strings share their bytes.
func unsafeStringData(s string) *byte { return unsafe.StringData(s) }

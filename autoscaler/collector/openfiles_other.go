//go:build !unix

package collector

// openFileLimit returns the process's limit of open files, if it has one.
func openFileLimit() (int, bool) { return 0, false }

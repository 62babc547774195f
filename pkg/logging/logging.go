// Package logging builds the zap loggers every Swell binary uses, so they all
// log alike: JSON for machines, console for a person at a terminal.
package logging

import (
	"fmt"
	"os"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/term"
)

// Formats accepted by New.
const (
	FormatAuto    = "auto"    // console when stderr is a terminal, else JSON
	FormatJSON    = "json"    // one JSON object per line
	FormatConsole = "console" // human-readable; levels coloured on a terminal
)

// New returns a logger writing to stderr in the given format ("auto",
// "json" or "console") at the given level ("debug", "info", "warn",
// "error").
func New(format, level string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(strings.ToLower(level))
	if err != nil {
		return nil, fmt.Errorf("log level %q: accepted are debug, info, warn, error", level)
	}
	switch format {
	case FormatAuto, "":
		format = FormatJSON
		if term.IsTerminal(int(os.Stderr.Fd())) {
			format = FormatConsole
		}
	case FormatJSON, FormatConsole:
	default:
		return nil, fmt.Errorf("log format %q: accepted are auto, json, console", format)
	}
	var cfg zap.Config
	if format == FormatJSON {
		cfg = zap.NewProductionConfig()
		cfg.EncoderConfig.TimeKey = "time"
		cfg.EncoderConfig.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	} else {
		cfg = zap.NewDevelopmentConfig()
		cfg.EncoderConfig.EncodeLevel = zapcore.CapitalLevelEncoder
		if term.IsTerminal(int(os.Stderr.Fd())) {
			// Colours only for a person at a terminal: in a file or
			// behind swell local's prefixes they are noise.
			cfg.EncoderConfig.EncodeLevel = zapcore.CapitalColorLevelEncoder
		}
		cfg.EncoderConfig.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		cfg.Development = false
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.Sampling = nil
	cfg.DisableStacktrace = lvl > zapcore.DebugLevel
	return cfg.Build()
}

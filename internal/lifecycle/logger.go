package lifecycle

import (
	"fmt"
	"io"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Log encodings: the values of log.format other than auto.
const (
	LogJSON    = "json"
	LogConsole = "console"
)

// LogEncoding is the encoding of log.format: json or console as forced,
// and for auto console on a terminal, json otherwise (a pipe, a file, the
// journal).
func LogEncoding(format string, terminal bool) string {
	switch {
	case format == LogJSON, format == LogConsole:
		return format
	case terminal:
		return LogConsole
	default:
		return LogJSON
	}
}

// IsTerminal reports whether w is a character device, as a terminal is.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// ParseLevel is log.level as the logger takes it.
func ParseLevel(level string) (zapcore.Level, error) {
	var l zapcore.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return l, fmt.Errorf("log.level: %w", err)
	}
	return l, nil
}

// NewLogger is the daemon's one logger: ISO 8601 times, writing to w in
// the encoding LogEncoding picks, at level (which a reload changes).
func NewLogger(format string, level zap.AtomicLevel, w io.Writer) *zap.Logger {
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	if LogEncoding(format, IsTerminal(w)) == LogConsole {
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		// A person reads "5s", not 5; JSON keeps seconds as numbers.
		encCfg.EncodeDuration = zapcore.StringDurationEncoder
		enc = zapcore.NewConsoleEncoder(encCfg)
	} else {
		enc = zapcore.NewJSONEncoder(encCfg)
	}
	sink := zapcore.Lock(zapcore.AddSync(w))
	return zap.New(zapcore.NewCore(enc, sink, level), zap.ErrorOutput(sink))
}

package raftmesh

import (
	"io"
	"log"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// hcLogger is hclog.Logger over the daemon's zap logger, for raft. Trace
// goes to Debug; key/value pairs become fields; SetLevel is ignored (the
// zap logger's level rules).
type hcLogger struct {
	z       *zap.Logger
	name    string
	implied []any
}

var _ hclog.Logger = (*hcLogger)(nil)

// NewHCLogger adapts z for raft (and raft-boltdb), named name.
func NewHCLogger(z *zap.Logger, name string) hclog.Logger {
	return &hcLogger{z: z.Named(name), name: name}
}

func fields(args []any) []zap.Field {
	fs := make([]zap.Field, 0, (len(args)+1)/2)
	for i := 0; i < len(args); i += 2 {
		key, ok := args[i].(string)
		if !ok {
			key = "arg"
		}
		if i+1 == len(args) {
			fs = append(fs, zap.Any("extra", args[i]))
			break
		}
		fs = append(fs, zap.Any(key, args[i+1]))
	}
	return fs
}

func (h *hcLogger) Log(level hclog.Level, msg string, args ...any) {
	lvl := zapLevel(level)
	if ce := h.z.Check(lvl, msg); ce != nil {
		ce.Write(fields(append(h.implied[:len(h.implied):len(h.implied)], args...))...)
	}
}

func zapLevel(l hclog.Level) zapcore.Level {
	switch l {
	case hclog.Error:
		return zapcore.ErrorLevel
	case hclog.Warn:
		return zapcore.WarnLevel
	case hclog.Info:
		return zapcore.InfoLevel
	default:
		return zapcore.DebugLevel
	}
}

func (h *hcLogger) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hcLogger) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hcLogger) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hcLogger) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hcLogger) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *hcLogger) IsTrace() bool { return h.z.Core().Enabled(zapcore.DebugLevel) }
func (h *hcLogger) IsDebug() bool { return h.z.Core().Enabled(zapcore.DebugLevel) }
func (h *hcLogger) IsInfo() bool  { return h.z.Core().Enabled(zapcore.InfoLevel) }
func (h *hcLogger) IsWarn() bool  { return h.z.Core().Enabled(zapcore.WarnLevel) }
func (h *hcLogger) IsError() bool { return h.z.Core().Enabled(zapcore.ErrorLevel) }

func (h *hcLogger) ImpliedArgs() []any { return h.implied }

func (h *hcLogger) With(args ...any) hclog.Logger {
	return &hcLogger{z: h.z, name: h.name, implied: append(h.implied[:len(h.implied):len(h.implied)], args...)}
}

func (h *hcLogger) Name() string { return h.name }

func (h *hcLogger) Named(name string) hclog.Logger {
	return &hcLogger{z: h.z.Named(name), name: h.name + "." + name, implied: h.implied}
}

func (h *hcLogger) ResetNamed(name string) hclog.Logger {
	return &hcLogger{z: h.z.Named(name), name: name, implied: h.implied}
}

func (h *hcLogger) SetLevel(hclog.Level) {}

func (h *hcLogger) GetLevel() hclog.Level {
	switch {
	case h.IsDebug():
		return hclog.Debug
	case h.IsInfo():
		return hclog.Info
	case h.IsWarn():
		return hclog.Warn
	default:
		return hclog.Error
	}
}

func (h *hcLogger) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return zap.NewStdLog(h.z)
}

func (h *hcLogger) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return zap.NewStdLog(h.z).Writer()
}

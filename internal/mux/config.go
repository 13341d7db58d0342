package mux

import (
	"errors"
	"fmt"
)

// Config bounds a session. Zero fields take their defaults. Both ends of a
// connection must use the same Window: a sender's window for a stream
// starts at its own Window, and the receiver refuses data past its own.
type Config struct {
	MaxStreams int // streams open at once on a session (default 256, max 4096)
	Window     int // each stream's receive window in bytes (default 256 KiB; 16 KiB..16 MiB)
	MaxFrame   int // largest DATA payload (default 16 KiB - 8 header bytes, so a frame fits one TLS record; 1 KiB..65535)
	WriteQueue int // bytes queued before writers wait (default 1 MiB; >= MaxFrame+8)
}

// withDefaults returns c with its zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.MaxStreams == 0 {
		c.MaxStreams = defaultMaxStreams
	}
	if c.Window == 0 {
		c.Window = defaultWindow
	}
	if c.MaxFrame == 0 {
		c.MaxFrame = defaultMaxFrame
	}
	if c.WriteQueue == 0 {
		c.WriteQueue = defaultWriteQueue
	}
	return c
}

// validate reports every problem of c (defaults applied) at once.
func (c Config) validate() error {
	var errs []error
	if c.MaxStreams < 1 || c.MaxStreams > maxMaxStreams {
		errs = append(errs, fmt.Errorf("MaxStreams %d: want 1..%d", c.MaxStreams, maxMaxStreams))
	}
	if c.Window < minWindow || c.Window > maxWindow {
		errs = append(errs, fmt.Errorf("Window %d: want %d..%d", c.Window, minWindow, maxWindow))
	}
	if c.MaxFrame < minMaxFrame || c.MaxFrame > maxMaxFrame {
		errs = append(errs, fmt.Errorf("MaxFrame %d: want %d..%d", c.MaxFrame, minMaxFrame, maxMaxFrame))
	}
	if c.WriteQueue < c.MaxFrame+headerLen {
		errs = append(errs, fmt.Errorf("WriteQueue %d: want at least MaxFrame+%d (%d)", c.WriteQueue, headerLen, c.MaxFrame+headerLen))
	}
	if len(errs) > 0 {
		return fmt.Errorf("mux config: %w", errors.Join(errs...))
	}
	return nil
}

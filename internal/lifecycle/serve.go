package lifecycle

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"
)

// Serve is a daemon's life on its chain: it chains node.start with start,
// runs run until SIGTERM or SIGINT (or ctx's end) with every SIGHUP on
// hup, and then chains node.stop with the reason (the signal, or run's
// error) and logs "stopped". It returns run's error, else the chain's.
func Serve(ctx context.Context, ch Appender, log *zap.Logger, start map[string]any, run func(ctx context.Context, hup <-chan os.Signal) error) error {
	if _, err := ch.Append(ChainSource, "node.start", start); err != nil {
		return fmt.Errorf("chain node.start: %w", err)
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	runErr := run(ctx, hup)
	reason := "signal"
	if runErr != nil {
		reason = runErr.Error()
	}
	if _, err := ch.Append(ChainSource, "node.stop", map[string]any{"reason": reason}); err != nil {
		log.Error("chain node.stop", zap.Error(err))
		if runErr == nil {
			runErr = fmt.Errorf("chain node.stop: %w", err)
		}
	}
	if runErr == nil {
		log.Info("stopped")
	}
	return runErr
}

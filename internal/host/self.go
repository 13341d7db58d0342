package host

import (
	"context"
	"io"
	"net"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/ctl"
)

// Self lets the operator's calls to "self" reach this node's host without
// the mesh (it is the dispatcher's LocalHost): the call comes over an
// in-memory stream, and the host fetches the package's files from
// Artifacts over another one.
type Self struct {
	Host *Host
	// Artifacts serves the package's files to peer (this node): the
	// dispatcher's ServeArtifact.
	Artifacts func(ctx context.Context, peer string, rw io.ReadWriter) error
	Log       *zap.Logger
}

// ServeLocal serves one call on st until it ends.
func (s Self) ServeLocal(ctx context.Context, st ctl.Stream) {
	err := s.Host.ServeLocal(ctx, st, func(ctx context.Context) (io.ReadWriteCloser, error) {
		hostEnd, dispatchEnd := net.Pipe()
		// Owned by the pipe: it ends when the host closes its end or ctx
		// ends, which Artifacts watches.
		go func() {
			defer dispatchEnd.Close()
			if err := s.Artifacts(ctx, s.Host.self.ID(), dispatchEnd); err != nil {
				s.Log.Debug("self artifact stream ended", zap.Error(err))
			}
		}()
		return hostEnd, nil
	})
	if err != nil {
		s.Log.Debug("local ctl call ended", zap.Error(err))
	}
}

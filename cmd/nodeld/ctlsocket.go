package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/nodeld/nodeld/internal/config"
)

// ctlSocket is the operator socket of nodeld ctl: --socket, else the
// config's. A config file that does not load (exactly what a refused
// reload leaves behind while the daemon runs on the old one) still gives
// the socket path written in it (config.SocketPathOf), said on stderr;
// when even that cannot be read, the error says to pass --socket.
func ctlSocket(socket, cfgPath string, stderr io.Writer) (string, error) {
	if socket != "" {
		return socket, nil
	}
	cfg, _, err := loadConfig(cfgPath, true)
	if err == nil {
		return cfg.SocketPath(), nil
	}
	file := cfgPath
	if file == "" {
		file = defaultConfigPath
	}
	data, rerr := os.ReadFile(file)
	if rerr != nil {
		return "", fmt.Errorf("%w\n(pass --socket PATH to reach the daemon without the config)", err)
	}
	path, perr := config.SocketPathOf(data)
	if perr != nil {
		return "", fmt.Errorf("%w\n(the operator socket cannot be read from %s either: %v; pass --socket PATH)", err, file, perr)
	}
	if abs, aerr := filepath.Abs(path); aerr == nil {
		path = abs
	}
	fmt.Fprintf(stderr, "nodeld ctl: %s does not load; using the operator socket written in it, %s (--socket PATH chooses another)\n", file, path)
	return path, nil
}

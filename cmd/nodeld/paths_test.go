package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nodeld/nodeld/internal/config"
)

// A relative data dir (the embedded default and configs/cluster use
// ./nodeld-data) is made absolute once, so package dirs handed to the
// runtime do not depend on the daemon's working directory.
func TestAbsolutePaths(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Node.DataDir = "./nodeld-data/b"
	cfg.Admin.Socket = "run/n.sock"
	if err := absolutePaths(cfg); err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(wd, "nodeld-data", "b"); cfg.Node.DataDir != want {
		t.Errorf("data dir = %q, want %q", cfg.Node.DataDir, want)
	}
	if want := filepath.Join(wd, "run", "n.sock"); cfg.Admin.Socket != want {
		t.Errorf("socket = %q, want %q", cfg.Admin.Socket, want)
	}
	// Both sides of a reload go through it, so an unchanged relative dir
	// is not a data_dir change.
	again := config.Default()
	again.Node.DataDir = "nodeld-data/b"
	if err := absolutePaths(again); err != nil {
		t.Fatal(err)
	}
	if d := config.Changed(cfg, again); d.Has("node.data_dir") {
		t.Errorf("same dir spelled two ways reads as a change: %+v", d)
	}
}

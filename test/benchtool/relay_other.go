//go:build !linux

package main

import (
	"context"
	"net"
)

func relayEpoll(context.Context, *net.TCPListener, *net.TCPAddr) error { return errNoEpoll }

package proxy

import (
	"net"
	"net/http"
)

// newTransport returns the transport shared by all roles for local
// instances: keep-alive with an idle pool sized for the roles'
// concurrency, no proxy from the environment, bounded dials, no HTTP/2 and
// no transparent compression (the client's Accept-Encoding goes through and
// the upstream's encoding comes back untouched). The MeshForwarder's own
// transport is built here too.
func newTransport(maxIdlePerHost int) *http.Transport {
	d := &net.Dialer{Timeout: upstreamDialTimeout, KeepAlive: -1}
	return &http.Transport{
		Proxy:               nil,
		DialContext:         d.DialContext,
		MaxIdleConns:        upstreamMaxIdleConns,
		MaxIdleConnsPerHost: maxIdlePerHost,
		IdleConnTimeout:     upstreamIdleTimeout,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		WriteBufferSize:     transportBufferBytes,
		ReadBufferSize:      transportBufferBytes,

		// Not net/http's 10 MiB default.
		MaxResponseHeaderBytes: MaxUpstreamHeaderBytes,
	}
}

package httpfast

import (
	"net"
	"net/http"
)

// NewTransport returns a net/http transport to local instances, for the
// requests the Pool does not carry (streamed bodies a mesh peer sends):
// keep-alive with maxIdlePerHost idle connections per instance, no proxy
// from the environment, bounded dials, no HTTP/2 and no transparent
// compression (the client's Accept-Encoding goes through and the
// instance's encoding comes back untouched).
func NewTransport(maxIdlePerHost int) *http.Transport {
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
		MaxResponseHeaderBytes: MaxResponseHeadBytes,
	}
}

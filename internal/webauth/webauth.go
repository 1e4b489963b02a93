// Package webauth holds the request checks the gateway's API and the web
// console share: the bearer token of a request, whether a request that
// writes comes from the site it is sent to, and whether its Host names
// the loopback interface (what an open gateway answers to).
package webauth

import (
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Bearer is the token of an Authorization header ("Bearer <token>",
// the scheme in any case), or "".
func Bearer(header string) string {
	scheme, tok, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

// SameOrigin reports whether a request that writes comes from the site
// it is sent to: the browser's Sec-Fetch-Site, else Origin, must say so
// when sent (a client that is no browser sends neither). The console's
// forms, an open gateway's API and the terminal's WebSocket all ask it.
func SameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return false
		}
	}
	return true
}

// LoopbackHost reports whether a request's Host names the loopback
// interface (localhost, 127.0.0.0/8, ::1): what an open console or gateway
// answers to, so that a page whose name a DNS rebinding points at 127.0.0.1
// reaches neither.
func LoopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Secure reports whether the request came over TLS, here or at a proxy
// that says so: a cookie set in answer is then Secure.
func Secure(r *http.Request) bool {
	return r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"
}

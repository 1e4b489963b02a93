package main

import (
	"net/http"
	"net/http/pprof"
)

// withPprof serves Go's profiles under /debug/pprof/ beside h, on the
// metrics listener only (--pprof): a heap profile at the start and the end
// of a long run says what a worker's memory grows with. Off by default: a
// profile names the worker's code and a CPU profile costs while it runs.
func withPprof(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return mux
}

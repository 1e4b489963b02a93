package gateway

// Patterns returns the patterns of every route the gateway serves.
func Patterns() []string {
	var p []string
	for _, rt := range (&Gateway{}).routes() {
		p = append(p, rt.pattern)
	}
	return p
}

// Codes returns every error code.
func Codes() []Code {
	return []Code{CodeInvalidJSON, CodeUnknownField, CodeInvalidJob, CodeInvalidBatch, CodeInvalidRequest,
		CodeUnauthorized, CodeForbidden, CodeNotFound, CodeMethodNotAllow, CodeRequestTimeout,
		CodeAlreadyFinished, CodeBodyTooLarge, CodeQueueFull, CodeTooManyRequests, CodeInternal,
		CodeNotImplemented, CodeUnavailable, CodeSessionCap}
}

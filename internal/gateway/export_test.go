package gateway

// Patterns returns the patterns of every route the gateway serves.
func Patterns() []string {
	var p []string
	for _, rt := range (&Gateway{}).routes() {
		p = append(p, rt.pattern)
	}
	// A session's port takes any method: the document lists the usual.
	for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
		p = append(p, m+" "+portPath)
	}
	return p
}

// Codes returns every error code.
func Codes() []Code {
	return []Code{CodeInvalidJSON, CodeUnknownField, CodeInvalidJob, CodeInvalidBatch, CodeInvalidRequest,
		CodeUnauthorized, CodeForbidden, CodeNotFound, CodeMethodNotAllow, CodeRequestTimeout,
		CodeAlreadyFinished, CodeBodyTooLarge, CodeQueueFull, CodeTooManyRequests, CodeInternal,
		CodeNotImplemented, CodeUnavailable, CodeSessionCap, CodeBadGateway}
}

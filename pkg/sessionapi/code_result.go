package sessionapi

// CodeResult is a cell's end: the value of its trailing expression as
// text, what it printed, and what it raised.
type CodeResult struct {
	// Language is the context's; ExitCode a bash cell's status (its last
	// command's), an error too when not 0.
	Language       string     `json:"language,omitempty"`
	ExitCode       *int       `json:"exit_code,omitempty"`
	Text           string     `json:"text,omitempty"`
	Stdout         string     `json:"stdout"`
	Stderr         string     `json:"stderr"`
	StdoutEncoding string     `json:"stdout_encoding,omitempty"`
	StderrEncoding string     `json:"stderr_encoding,omitempty"`
	Error          *CodeError `json:"error,omitempty"`
	// Reset is true when the context was started afresh for this cell:
	// its first, or after its interpreter died or was reset.
	Reset      bool  `json:"reset,omitempty"`
	TimedOut   bool  `json:"timed_out,omitempty"`
	DurationMS int64 `json:"duration_ms"`
	// Display are the cell's display outputs, as a job's result has them
	// (the figures it showed or left open, with the python-data preset),
	// and DisplayDropped those past the bounds or of a type not shown.
	Display        []Display `json:"display,omitempty"`
	DisplayDropped int       `json:"display_dropped,omitempty"`
}

// Display is a display output of a cell or a job: a figure. Data is
// base64; Width and Height an image's, from its header.
type Display struct {
	MIME   string `json:"mime"`
	Data   string `json:"data"`
	Width  int    `json:"width,omitempty"`
	Height int    `json:"height,omitempty"`
}

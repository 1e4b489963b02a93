package mcp

import (
	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Output is the structuredContent of run_code and exec: their result as
// data, for a client that reads a tool's outputSchema, beside the text a
// model reads. Its streams and value are cut as the text cuts them, so
// both stay within Options.MaxOutput.
type Output struct {
	// Status is the job's (succeeded, failed, timeout, oom, ...), a cell's
	// or a command's (ok, error, timeout), or not_run when the fleet did
	// not run the code (Message says why).
	Status   string       `json:"status" jsonschema:"succeeded, failed, timeout, ... (a job); ok, error, timeout (a cell or a command); not_run"`
	ExitCode *int         `json:"exit_code,omitempty" jsonschema:"the program's or the command's exit code"`
	Stdout   string       `json:"stdout" jsonschema:"standard output, cut in the middle past the result's bound"`
	Stderr   string       `json:"stderr" jsonschema:"standard error, cut in the middle past the result's bound"`
	Value    string       `json:"value,omitempty" jsonschema:"a session cell's trailing expression, as its repr"`
	Error    *OutputError `json:"error,omitempty" jsonschema:"what a session cell raised"`
	Message  string       `json:"message,omitempty" jsonschema:"why the code did not run, or what the fleet said of the job"`
	Figures  []Figure     `json:"figures,omitempty" jsonschema:"the figures shown, each an image of content"`
	Files    []File       `json:"files,omitempty" jsonschema:"the files returned (outputs)"`
	Job      string       `json:"job,omitempty" jsonschema:"the job's ID"`
	Session  string       `json:"session,omitempty" jsonschema:"the session the code or command ran in"`
	// DurationMS is how long the program ran.
	DurationMS *int64 `json:"duration_ms,omitempty"`
}

// OutputError is what a cell raised.
type OutputError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback,omitempty"`
}

// Figure is a figure the code showed: its image is content[Content].
type Figure struct {
	MIMEType string `json:"mime_type"`
	Bytes    int    `json:"bytes"`
	Content  int    `json:"content" jsonschema:"the index of its image in the result's content"`
}

// File is a file the job returned: an image in content[Content], or a
// resource link to URI.
type File struct {
	Name    string `json:"name"`
	Size    int64  `json:"size"`
	URI     string `json:"uri" jsonschema:"the resource resources/read gives"`
	Content *int   `json:"content,omitempty" jsonschema:"the index of its image or link in the result's content"`
}

// outputSchema is Output's JSON Schema, the outputSchema of the tools
// that return one.
var outputSchema = func() *jsonschema.Schema {
	s, err := jsonschema.For[Output](nil)
	if err != nil {
		panic(err) // a fixed type: only a programming error fails
	}
	return s
}()

// withOutput sets res's structuredContent.
func withOutput(res *sdk.CallToolResult, o *Output) *sdk.CallToolResult {
	res.StructuredContent = o
	return res
}

package mcp

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/sandfleet/sandfleet/internal/cmdline"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// Options bound what the tools do and say. The zero value of each field
// is its documented default.
type Options struct {
	// MaxOutput is the most bytes of text a tool's result holds, stdout,
	// stderr and what the tool says around them together: past it the
	// streams are cut in the middle, and the result says how much was
	// left out. Default 32 KiB; at least 1 KiB.
	MaxOutput int
	// MaxImageBytes is the most bytes of images (PNG, JPEG, GIF, WebP
	// artifacts) a result carries as image content, all together; the
	// images past it are listed as resource links. 0 means the default,
	// 1 MiB; negative, no images.
	MaxImageBytes int64
	// Languages are the presets run_code offers, in its schema's enum.
	// Default DefaultLanguages.
	Languages []string
	// Limits are what the descriptions say a job gets. Default
	// limits.Default(). Only the timeout can be asked for in a call.
	Limits limits.Limits
	// MaxTimeout is the longest timeout a call may ask for. Default 10m,
	// the workers' default cap.
	MaxTimeout time.Duration
	// Wait is how long a call waits for its job beyond the job's timeout
	// (queueing, starting): past it the job is canceled and the call says
	// the fleet is busy. Default 2m.
	Wait time.Duration
	// Progress is how often a call that asked for progress (a
	// progressToken) is told that its job still runs. Default 10s.
	Progress time.Duration
	// Logger for what the server does; never the standard output of a
	// stdio server. Default slog.Default().
	Logger *slog.Logger
	// Version is what the server says it is in initialize (serverInfo):
	// the build's, as --version prints it. Default the module's version or
	// VCS revision the binary was built from, else "dev".
	Version string
	// Sessions offers the tools of sessions (create_session, exec,
	// read_file, write_file, list_files, close_session, and run_code's
	// session argument). Default off.
	Sessions bool
}

// DefaultLanguages are the presets of a worker configured with none
// (executor.DefaultPresets; a test keeps the two equal). A worker that
// lacks one rejects the job, and the tool result says which it has.
var DefaultLanguages = []string{"python", "shell", "node", "c", "cpp", "java", "go", "rust", "python-data"}

// Default output bound and image budget.
const (
	DefaultMaxOutput     = 32 << 10
	DefaultMaxImageBytes = 1 << 20
	minMaxOutput         = 1 << 10
)

// SetDefaults fills the zero fields.
func (o *Options) SetDefaults() {
	if o.MaxOutput == 0 {
		o.MaxOutput = DefaultMaxOutput
	}
	if o.MaxImageBytes == 0 {
		o.MaxImageBytes = DefaultMaxImageBytes
	}
	if len(o.Languages) == 0 {
		o.Languages = DefaultLanguages
	}
	o.Limits = o.Limits.Fill(limits.Default())
	if o.MaxTimeout <= 0 {
		o.MaxTimeout = limits.DefaultCaps().Timeout.D()
	}
	if o.Wait <= 0 {
		o.Wait = 2 * time.Minute
	}
	if o.Progress <= 0 {
		o.Progress = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Version == "" {
		o.Version = cmdline.Version("")
	}
}

// Validate names the field that is out of range. Call it after
// SetDefaults.
func (o *Options) Validate() error {
	if o.MaxOutput < minMaxOutput {
		return fmt.Errorf("mcp: MaxOutput %d: at least %d bytes, room for a status and a line of output", o.MaxOutput, minMaxOutput)
	}
	if o.MaxTimeout < o.Limits.Timeout.D() {
		return fmt.Errorf("mcp: MaxTimeout %s is below the default timeout %s", o.MaxTimeout, o.Limits.Timeout.D())
	}
	return nil
}

// Def is one tool: what a model is told about it. The MCP server and every
// function-calling format are made from the same Defs.
type Def struct {
	Name        string
	Description string
	InputSchema *jsonschema.Schema
	// OutputSchema, if set, is the shape of the structuredContent of the
	// tool's results (MCP's tools/list says it; the function-calling
	// formats have no place for it).
	OutputSchema *jsonschema.Schema
}

// Tool names.
const (
	ToolRunCode = "run_code"
)

// Definitions are the tools, in the order tools/list gives them.
func (o *Options) Definitions() []Def {
	defs := []Def{o.runCodeDef()}
	if o.Sessions {
		defs = append(defs, o.sessionDefs()...)
	}
	return defs
}

// RunCodeArgs are run_code's arguments (its schema is runCodeDef's).
type RunCodeArgs struct {
	Language string            `json:"language"`
	Code     string            `json:"code"`
	Files    map[string]string `json:"files,omitempty"`
	Stdin    string            `json:"stdin,omitempty"`
	Timeout  float64           `json:"timeout,omitempty"` // seconds
	Outputs  []string          `json:"outputs,omitempty"`
	Session  string            `json:"session,omitempty"`
}

func (o *Options) runCodeDef() Def {
	l := o.Limits
	network := "no network"
	if !l.Network.None() {
		network = "a network"
	}
	desc := fmt.Sprintf("Run a program in a fresh, isolated sandbox and return its exit status, stdout, stderr and the files it wrote. "+
		"Each call is a new sandbox: nothing is kept between calls. "+
		"Limits: timeout %s by default, at most %s; %s of memory; %g CPU; %s; each of stdout and stderr is cut at %s by the sandbox, "+
		"and the result shows at most %d bytes of them together (the middle of a longer output is left out, and the result says so). "+
		"A program that fails or times out is a result with isError set, its stderr included. "+
		"Files matching outputs (globs such as \"*.png\") are returned: images as image content, other files as links; "+
		"figures the program shows (matplotlib with python-data) come back as images too, at most %s of images a result.",
		l.Timeout.D(), o.MaxTimeout, human(l.Memory), l.CPUs, network, human(l.Output), o.MaxOutput, human(limits.Size(max(o.MaxImageBytes, 0))))
	langs := make([]any, len(o.Languages))
	for i, s := range o.Languages {
		langs[i] = s
	}
	maxT := o.MaxTimeout.Seconds()
	minT := 0.0
	d := Def{
		Name:         ToolRunCode,
		Description:  desc,
		OutputSchema: outputSchema,
		InputSchema: &jsonschema.Schema{
			Type:     "object",
			Required: []string{"language", "code"},
			Properties: map[string]*jsonschema.Schema{
				"language": {Type: "string", Enum: langs,
					Description: "The language, which names how the code runs: python runs python3 main.py, shell runs bash main.sh; the compiled ones compile the code first."},
				"code": {Type: "string",
					Description: "The program's source, written to the language's main file (main.py, main.sh, main.js, main.c, main.cpp, Main.java, main.go, main.rs) in the working directory."},
				"files": {Type: "object", AdditionalProperties: &jsonschema.Schema{Type: "string"},
					Description: "Other files to put in the working directory before the run: relative path to text content."},
				"stdin": {Type: "string", Description: "What the program reads on its standard input."},
				"timeout": {Type: "number", ExclusiveMinimum: &minT, Maximum: &maxT,
					Description: fmt.Sprintf("Wall-clock limit in seconds (default %g, at most %g): past it the program is killed and the status is timeout.", l.Timeout.D().Seconds(), maxT)},
				"outputs": {Type: "array", Items: &jsonschema.Schema{Type: "string"},
					Description: "Globs of files under the working directory to return after the run, e.g. [\"*.png\", \"out/**\"]."},
			},
			AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}},
		},
	}
	if o.Sessions {
		d.InputSchema.Properties["session"] = &jsonschema.Schema{Type: "string",
			Description: "A session's id (create_session): the code runs as a cell of the session's context of its language instead of a fresh sandbox (python, the default; node for JavaScript, typescript, shell for bash, in an image that has them); its globals (a shell's cwd and variables) stay for the next cell and the value of a trailing expression is returned. language may be left out: python."}
		if !slices.Contains(langs, any("typescript")) {
			lang := d.InputSchema.Properties["language"]
			lang.Enum = append(lang.Enum, "typescript")
			lang.Description += " typescript: a session's cells only."
		}
		// A session decides the language; without one the call says it
		// lacks it (a schema's "one of the two" is refused by the
		// function-calling APIs at the top level).
		d.InputSchema.Required = []string{"code"}
		d.InputSchema.Properties["language"].Description += " Required unless session is given."
	}
	return d
}

// human writes a size as people do: 512 MiB.
func human(s limits.Size) string {
	for _, u := range []struct {
		n    limits.Size
		name string
	}{{limits.GiB, "GiB"}, {limits.MiB, "MiB"}, {limits.KiB, "KiB"}} {
		if s >= u.n && s%u.n == 0 {
			return fmt.Sprintf("%d %s", s/u.n, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", s)
}

// Formats of ToolList.
const (
	FormatMCP       = "mcp"
	FormatOpenAI    = "openai"
	FormatAnthropic = "anthropic"
)

// Formats lists the formats ToolList takes.
var Formats = []string{FormatMCP, FormatOpenAI, FormatAnthropic}

// ToolList renders defs as one function-calling format: MCP's tools/list
// entries ({name, description, inputSchema}), OpenAI's function tools
// ({"type": "function", "function": {name, description, parameters}},
// for Chat Completions) or Anthropic's ({name, description,
// input_schema}). ok is false for another format.
func ToolList(defs []Def, format string) (list []any, ok bool) {
	if !slices.Contains(Formats, format) {
		return nil, false
	}
	list = []any{}
	for _, d := range defs {
		switch format {
		case FormatMCP:
			t := map[string]any{"name": d.Name, "description": d.Description, "inputSchema": d.InputSchema}
			if d.OutputSchema != nil {
				t["outputSchema"] = d.OutputSchema
			}
			list = append(list, t)
		case FormatOpenAI:
			list = append(list, map[string]any{"type": "function", "function": map[string]any{
				"name": d.Name, "description": d.Description, "parameters": d.InputSchema}})
		case FormatAnthropic:
			list = append(list, map[string]any{"name": d.Name, "description": d.Description, "input_schema": d.InputSchema})
		}
	}
	return list, true
}

// ToolsJSON is GET /v1/tools's answer: {"format": F, "tools": [...]}.
func ToolsJSON(defs []Def, format string) ([]byte, bool) {
	list, ok := ToolList(defs, format)
	if !ok {
		return nil, false
	}
	data, err := json.Marshal(map[string]any{"format": format, "tools": list})
	return data, err == nil
}

package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// ErrNoTool is a Call of a tool the server does not have.
var ErrNoTool = errors.New("no such tool")

// call runs one tool outside an MCP session: what POST /v1/tools/{name}
// and the clients' dispatchers use.
type call func(ctx context.Context, c *Caller, args json.RawMessage) (*sdk.CallToolResult, error)

// Call runs tool name with args (a JSON object; empty is {}) as c, as a
// tools/call of /mcp would: the same handler, the arguments checked
// against the same input schema (with its defaults), a bad argument an
// isError result the model may correct. A function-calling model's tool
// call (OpenAI's or Anthropic's shape) thus runs exactly what the MCP
// tool runs.
func (s *Server) Call(ctx context.Context, c *Caller, name string, args json.RawMessage) (*sdk.CallToolResult, error) {
	f, ok := s.calls[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNoTool, name)
	}
	return f(ctx, c, args)
}

// callOf is h as a call: args decoded into In the way the SDK's AddTool
// decodes a tools/call's.
func callOf[In any](d Def, h func(ctx context.Context, req *sdk.CallToolRequest, in In) (*sdk.CallToolResult, error)) (call, error) {
	resolved, err := d.InputSchema.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("tool %s: %w", d.Name, err)
	}
	return func(ctx context.Context, c *Caller, args json.RawMessage) (*sdk.CallToolResult, error) {
		if len(args) == 0 || string(args) == "null" {
			args = json.RawMessage("{}")
		}
		var m map[string]any
		if err := json.Unmarshal(args, &m); err != nil || m == nil {
			return badArguments(fmt.Errorf("the arguments must be a JSON object")), nil
		}
		if err := resolved.ApplyDefaults(&m); err != nil {
			return badArguments(err), nil
		}
		if err := resolved.Validate(m); err != nil {
			return badArguments(err), nil
		}
		data, err := json.Marshal(m)
		if err != nil {
			return badArguments(err), nil
		}
		var in In
		if err := json.Unmarshal(data, &in); err != nil {
			return badArguments(err), nil
		}
		req := &sdk.CallToolRequest{Params: &sdk.CallToolParamsRaw{Name: d.Name, Arguments: data}}
		if c != nil {
			req.Extra = &sdk.RequestExtra{TokenInfo: &auth.TokenInfo{UserID: c.Name, Extra: map[string]any{callerKey: c}}}
		}
		res, err := h(ctx, req, in)
		if err != nil {
			res = &sdk.CallToolResult{}
			res.SetError(err)
		}
		return res, nil
	}, nil
}

// badArguments is a call whose arguments the schema refuses, said as the
// SDK says it over MCP.
func badArguments(err error) *sdk.CallToolResult {
	res := &sdk.CallToolResult{}
	res.SetError(fmt.Errorf("validating \"arguments\": %v", err))
	return res
}

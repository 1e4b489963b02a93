// Package mcp makes sandfleet a code-execution tool for agents: an MCP
// server (the official Go SDK's) whose tools run one-shot jobs on the
// fleet, and the same tools as function-calling definitions for OpenAI's
// and Anthropic's APIs.
//
// The tools are defined once (Definitions); the MCP server, GET /v1/tools
// and every format are made from those definitions, so they cannot drift.
// A tool runs its job through a Runner: the gateway's runs as the caller's
// token over jobs.Client, `submit mcp` runs over NATS (jobs.Client) or the
// gateway's HTTP API (HTTPRunner).
//
// A failing program, a timeout or a fleet that cannot run the job is a
// tool result with isError set, which the model reads; so are arguments
// the tool's schema refuses, as the MCP specification asks, so that the
// model can correct its call. A protocol error is only for a call that is
// not one: an unknown tool, a malformed request. Every result's text stays within Options.MaxOutput
// bytes and its images within Options.MaxImageBytes, whatever the job
// printed.
package mcp

package sessionapi

// The operations a session answers: the last token of its subject
// (sessions.Subject). Those the agent in the sandbox serves (exec, code,
// reset, processes, process, signal, stdin and the files') it is asked
// by the same name, with the same request, and answers with the same
// result: the worker's session host checks the request, bounds its
// timeout and forwards it. The rest the session host answers.
const (
	OpInfo      = "info"
	OpDelete    = "delete"
	OpKeepalive = "keepalive"
	OpExec      = "exec"  // ExecRequest -> ExecResult
	OpCode      = "code"  // CodeRequest -> CodeResult
	OpReset     = "reset" // CodeRequest (its Context and Language)
	// Code contexts: OpContexts lists them (-> []Context), OpContext
	// starts one (ContextRequest -> Context), OpEndContext ends one
	// (ContextRequest: Name alone).
	OpContexts   = "contexts"
	OpContext    = "context"
	OpEndContext = "endcontext"
	OpProcesses  = "processes" // -> []Process
	OpProcess    = "process"   // ProcessRequest -> ProcessOutput: wait for or read a background process
	OpSignal     = "signal"    // SignalRequest
	OpStdin      = "stdin"     // StdinRequest
	OpRead       = "read"      // FileRequest -> FileResult: Length bytes from Offset
	OpWrite      = "write"     // FileRequest -> FileResult (Append: at its end)
	OpList       = "list"      // FileRequest -> FileResult.Entries
	OpStat       = "stat"      // FileRequest -> FileResult.Entry
	OpRemove     = "remove"    // FileRequest (Recursive: a tree)
	OpMkdir      = "mkdir"     // FileRequest: a directory and its parents
	OpRename     = "rename"    // FileRequest: Path to To
	// OpPause checkpoints a persistent session and frees its sandbox.
	OpPause = "pause"
	// OpCheckpoint checkpoints a persistent session now (what a fork asks
	// of its source first).
	OpCheckpoint = "checkpoint"
	// OpNetwork replaces the session's egress policy (limits.network)
	// while it runs, within the worker's caps: "none" locks it.
	OpNetwork = "network"
	// OpCells reads the session's recent cells (sessions.CellsRequest ->
	// sessions.Cells).
	OpCells = "cells"
	// OpPTY opens a terminal (sessions.PTYRequest -> sessions.PTYInfo).
	OpPTY = "pty"
	// Ports: OpExpose lets a port of the sandbox's loopback be reached,
	// OpUnexpose stops it, OpPorts lists them, OpConn opens a connection
	// to one (sessions.ConnRequest -> sessions.ConnInfo).
	OpExpose   = "expose"
	OpUnexpose = "unexpose"
	OpPorts    = "ports"
	OpConn     = "conn"
)

// IsFileOp reports whether op is one of the files' (it takes a
// FileRequest).
func IsFileOp(op string) bool {
	switch op {
	case OpRead, OpWrite, OpList, OpStat, OpRemove, OpMkdir, OpRename:
		return true
	}
	return false
}

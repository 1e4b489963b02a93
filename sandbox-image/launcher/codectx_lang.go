package main

import (
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"sort"
	"strings"
)

// The languages of a session's code contexts. Each runs a driver in the
// interpreter's own process (codectx.go says why its answers are safe to
// take): it reads a cell from fd 3 and answers on fd 4, on a line of its
// own, with the cell's nonce.

//go:embed codectx_node.js
var nodeDriver string

//go:embed codectx_bash.sh
var bashDriver string

// language is how one language's context is started and spoken to.
type language struct {
	name string
	argv []string
	// request is the line a cell is sent as.
	request func(nonce, code string) []byte
	// group: the interrupt goes to the context's whole process group (a
	// shell's command, whatever a Node cell spawned), not its interpreter
	// alone, so that a command that runs in the shell stops.
	group bool
}

func jsonRequest(nonce, code string) []byte {
	line, _ := json.Marshal(map[string]string{"nonce": nonce, "code": code})
	return append(line, '\n')
}

// bashRequest is a line the shell's read can take whatever the code
// holds: the nonce and the code in base64.
func bashRequest(nonce, code string) []byte {
	return []byte(nonce + " " + base64.StdEncoding.EncodeToString([]byte(code)) + "\n")
}

var languages = map[string]*language{
	"python": {name: "python", argv: []string{"python3", "-u", "-c", pyDriver}, request: jsonRequest},
	"javascript": {name: "javascript", argv: []string{"node", "--expose-internals", "-e", nodeDriver, "javascript"},
		request: jsonRequest, group: true},
	"typescript": {name: "typescript", argv: []string{"node", "--expose-internals", "-e", nodeDriver, "typescript"},
		request: jsonRequest, group: true},
	"bash": {name: "bash", argv: []string{"bash", "--noprofile", "--norc", "-c", bashDriver},
		request: bashRequest, group: true},
}

// languageOf is the language a request names; "" is python's.
func languageOf(name string) (*language, bool) {
	if name == "" {
		name = "python"
	}
	l, ok := languages[name]
	return l, ok
}

func languageNames() string {
	var names []string
	for n := range languages {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// Package docs holds the repository's pages; LLMsTxt is the one the
// gateway serves.
package docs

import _ "embed"

// LLMsTxt is llms.txt: what an agent that reads documentation is told of
// the API and its tools, served at /llms.txt.
//
//go:embed llms.txt
var LLMsTxt []byte

package gateway

import (
	_ "embed"
	"net/http"

	"github.com/sandfleet/sandfleet/docs"
)

// Document is the OpenAPI 3 description of the API (openapi.yaml), served
// at /openapi.yaml. TestOpenAPI checks every handler against it.
//
//go:embed openapi.yaml
var Document []byte

func serveDocument(w http.ResponseWriter, _ *http.Request, _ *Token) error {
	w.Header().Set("Content-Type", "application/yaml")
	_, err := w.Write(Document)
	return err
}

// serveLLMsTxt: GET /llms.txt, the repository's docs/llms.txt: the API and
// its tools in a few lines, for an agent that reads documentation.
func serveLLMsTxt(w http.ResponseWriter, _ *http.Request, _ *Token) error {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, err := w.Write(docs.LLMsTxt)
	return err
}

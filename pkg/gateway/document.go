package gateway

import (
	_ "embed"
	"net/http"
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

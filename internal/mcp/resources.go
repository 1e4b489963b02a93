package mcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// artifactPrefix starts the URI of every artifact a result links:
// sandfleet:///jobs/{id}/artifacts/{name}, readable with resources/read.
const artifactPrefix = "sandfleet:///jobs/"

// ArtifactURI names an artifact in a resource link.
func ArtifactURI(jobID, name string) string {
	return artifactPrefix + jobID + "/artifacts/" + name
}

// parseArtifactURI is ArtifactURI's inverse.
func parseArtifactURI(uri string) (id, name string, ok bool) {
	rest, ok := strings.CutPrefix(uri, artifactPrefix)
	if !ok {
		return "", "", false
	}
	id, name, ok = strings.Cut(rest, "/artifacts/")
	if !ok || !jobs.ValidID(id) || name == "" {
		return "", "", false
	}
	return id, name, true
}

// addArtifacts makes the links of results readable: resources/read of an
// artifact's URI gives its bytes, as text when they are UTF-8 text, within
// the same bounds as a result (MaxOutput for text, MaxImageBytes for
// other bytes); a larger file is refused with where to download it.
func (s *Server) addArtifacts() {
	s.srv.AddResourceTemplate(&sdk.ResourceTemplate{
		Name:        "artifact",
		URITemplate: artifactPrefix + "{id}/artifacts/{+name}",
		Description: "A file a run_code job returned (its outputs), as the result's links name it.",
	}, s.readArtifact)
}

func (s *Server) readArtifact(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	uri := req.Params.URI
	id, name, ok := parseArtifactURI(uri)
	if !ok {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	r, err := s.runner(callerOf(req.Extra))
	if err != nil {
		return nil, err
	}
	res, err := r.Result(ctx, id)
	if errors.Is(err, jobs.ErrNotFound) {
		return nil, sdk.ResourceNotFoundError(uri)
	} else if err != nil {
		return nil, fmt.Errorf("job %s: %w", id, err)
	}
	for _, a := range res.Artifacts {
		if a.Name != name {
			continue
		}
		mt := mimeOf(a.Name)
		bound := max(int64(s.opts.MaxOutput), s.opts.MaxImageBytes)
		if a.Size > bound {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(
				"artifact %s is %d bytes, over the %d this server returns: GET /v1/jobs/%s/artifacts/%s on the gateway, or submit artifacts %s -O DIR",
				name, a.Size, bound, id, url.PathEscape(name), id)}
		}
		var buf bytes.Buffer
		if err := r.WriteArtifact(ctx, res, a, &limitWriter{w: &buf, n: a.Size}); err != nil {
			return nil, err
		}
		c := &sdk.ResourceContents{URI: uri, MIMEType: mt}
		if utf8.Valid(buf.Bytes()) && !imageTypes[mt] && buf.Len() <= s.opts.MaxOutput {
			c.Text = buf.String()
		} else {
			c.Blob = buf.Bytes()
		}
		return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{c}}, nil
	}
	return nil, sdk.ResourceNotFoundError(uri)
}

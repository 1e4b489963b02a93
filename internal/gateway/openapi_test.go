package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	legacyrouter "github.com/getkin/kin-openapi/routers/legacy"

	"github.com/sandfleet/sandfleet/internal/gateway"
)

// contract checks requests and answers against openapi.yaml, and counts
// which operations and statuses the tests exercised.
type contract struct {
	doc    *openapi3.T
	router routers.Router
	mu     sync.Mutex
	seen   map[string]bool // "operationId status"
}

var (
	contractOnce sync.Once
	theContract  *contract
	contractErr  error
)

func loadContract(t testing.TB) *contract {
	t.Helper()
	contractOnce.Do(func() {
		openapi3filter.RegisterBodyDecoder("application/x-ndjson", decodeNDJSON)
		openapi3filter.RegisterBodyDecoder("application/yaml", openapi3filter.FileBodyDecoder)
		openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.FileBodyDecoder)
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(gateway.Document)
		if err != nil {
			contractErr = err
			return
		}
		if err := doc.Validate(context.Background()); err != nil {
			contractErr = fmt.Errorf("openapi.yaml is not a valid OpenAPI 3 document: %w", err)
			return
		}
		doc.Servers = nil // match any host: the tests listen on random ports
		r, err := legacyrouter.NewRouter(doc)
		if err != nil {
			contractErr = err
			return
		}
		theContract = &contract{doc: doc, router: r, seen: map[string]bool{}}
	})
	if contractErr != nil {
		t.Fatal(contractErr)
	}
	return theContract
}

// decodeNDJSON validates every line of a JSONL body against the schema of
// one line, and returns the last (which the filter validates again).
func decodeNDJSON(body io.Reader, _ http.Header, schema *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(nil, 16<<20)
	var last any = map[string]any{}
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var v any
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if err := schema.Value.VisitJSON(v); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		last = v
	}
	return last, sc.Err()
}

// check validates one exchange. It returns the request's validation error
// (nil when the document takes the request) and fails the test when the
// answer does not match the document.
func (c *contract) check(t testing.TB, method, path string, hdr http.Header, body []byte, rep reply) (reqErr error) {
	t.Helper()
	req, err := http.NewRequest(method, "http://gateway"+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = hdr.Clone()
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		if rep.status != http.StatusNotFound && rep.status != http.StatusMethodNotAllowed {
			t.Errorf("%s %s: not in openapi.yaml (%v) but answered %d", method, path, err, rep.status)
		}
		return err
	}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	reqErr = openapi3filter.ValidateRequest(context.Background(), in)
	if _, ok := route.Operation.Responses.Map()[fmt.Sprint(rep.status)]; !ok {
		t.Errorf("%s %s: answered %d, which openapi.yaml does not list for %s", method, path, rep.status, route.Operation.OperationID)
	}
	// The answer is checked whatever the request was: a refused request
	// gets a documented error too.
	in.Options = &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true, MultiError: true}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: rep.status, Header: rep.header,
		Body: io.NopCloser(bytes.NewReader(rep.body)), Options: in.Options}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("%s %s → %d: the answer does not match openapi.yaml: %v\nbody: %.600s", method, path, rep.status, err, rep.body)
	}
	c.mu.Lock()
	c.seen[route.Operation.OperationID+" "+fmt.Sprint(rep.status)] = true
	c.mu.Unlock()
	return reqErr
}

// The document and the mux agree: every route the gateway serves is in
// openapi.yaml, and every operation there is a route.
func TestOpenAPIRoutesMatchDocument(t *testing.T) {
	t.Parallel()
	c := loadContract(t)
	served := map[string]bool{}
	for _, p := range gateway.Patterns() {
		method, path, _ := strings.Cut(p, " ")
		path = regexp.MustCompile(`\{(\w+)\.\.\.\}`).ReplaceAllString(path, "{$1}")
		served[method+" "+path] = true
	}
	documented := map[string]bool{}
	for path, item := range c.doc.Paths.Map() {
		for method := range item.Operations() {
			documented[method+" "+path] = true
		}
	}
	for k := range served {
		if !documented[k] {
			t.Errorf("%s is served but not in openapi.yaml", k)
		}
	}
	for k := range documented {
		if !served[k] {
			t.Errorf("%s is in openapi.yaml but not served", k)
		}
	}
	// Every error code the gateway has is in the document's enum.
	enum := c.doc.Components.Schemas["ErrorCode"].Value.Enum
	for _, code := range gateway.Codes() {
		if !slices.Contains(enum, any(string(code))) {
			t.Errorf("code %s is not in openapi.yaml's ErrorCode", code)
		}
	}
}

// Every route that takes a body in openapi.yaml takes a real one: a body
// of a size any of them allows is read, not refused 413 (a route whose
// body limit was left at zero refuses every body).
func TestEveryDocumentedBodyIsTaken(t *testing.T) {
	t.Parallel()
	c := loadContract(t)
	b := setup(t, options{})
	param := regexp.MustCompile(`\{(\w+)\}`)
	n := 0
	for path, item := range c.doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.RequestBody == nil || op.RequestBody.Value == nil {
				continue
			}
			for ctype := range op.RequestBody.Value.Content {
				n++
				url := param.ReplaceAllStringFunc(path, func(p string) string {
					if p == "{pid}" {
						return "1"
					}
					return "x"
				})
				body := bytes.Repeat([]byte("a"), 512)
				if strings.Contains(ctype, "json") {
					body = append([]byte("{}"), bytes.Repeat([]byte(" "), 510)...)
				}
				rep := b.do(t, method, url, b.alice, body, "Content-Type", ctype)
				if rep.status == http.StatusRequestEntityTooLarge {
					t.Errorf("%s %s (%s): a body of %d bytes is refused 413: %s", method, path, ctype, len(body), rep.body)
				}
			}
		}
	}
	if n < 10 {
		t.Fatalf("only %d routes with a body in openapi.yaml: the document was not read", n)
	}
}

package mcp

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// displays turns a job's or a cell's display outputs (a matplotlib figure
// it showed or left open) into image content, in order, within what is
// left of budget, as image does for artifacts: a figure is what a model
// asked for when it plotted, so it comes back as an image, not a file to
// fetch. note says, in a few lines, what was not shown and why.
func displays(ds []jobs.Display, dropped int, budget *int64) (imgs []sdk.Content, note string) {
	var b strings.Builder
	var skipped int
	for _, d := range ds {
		data, err := base64.StdEncoding.DecodeString(d.Data)
		why := ""
		switch {
		case err != nil || len(data) == 0:
			why = "not readable"
		case !imageTypes[d.MIME] || !imageTypes[http.DetectContentType(data)]:
			why = "not an image a model reads"
		case int64(len(data)) > *budget:
			why = "over the result's bound for images"
		}
		if why == "" {
			*budget -= int64(len(data))
			imgs = append(imgs, &sdk.ImageContent{Data: data, MIMEType: http.DetectContentType(data)})
			fmt.Fprintf(&b, "figure %d (%s, %d bytes): image below\n", len(imgs), d.MIME, len(data))
			continue
		}
		skipped++
		if skipped <= maxListed {
			fmt.Fprintf(&b, "a display output (%s, %d bytes) is not shown: %s\n", clip(d.MIME, 100), len(data), why)
		}
	}
	if skipped > maxListed {
		fmt.Fprintf(&b, "and %d more display outputs not shown\n", skipped-maxListed)
	}
	if dropped > 0 {
		fmt.Fprintf(&b, "%d more display outputs were past the sandbox's bounds and not kept\n", dropped)
	}
	return imgs, b.String()
}

package mcp

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/conductor-dev/conductor/conductor/runrec"
)

// maxResource bounds a transcript or patch served as a resource.
const maxResource = 32 << 20

const uriPrefix = "conductor://runs/"

func transcriptURI(runID string) string { return uriPrefix + runID + "/transcript" }
func patchURI(runID string) string      { return uriPrefix + runID + "/patch" }

func (s *Server) addResources() {
	s.mcp.AddResourceTemplate(&sdk.ResourceTemplate{
		Name: "transcript", Title: "Run transcript", MIMEType: "application/x-ndjson",
		Description: "A run's transcript: one JSON line per model turn and tool call (transcript.jsonl of the run folder).",
		URITemplate: uriPrefix + "{runId}/transcript",
	}, s.readRunFile)
	s.mcp.AddResourceTemplate(&sdk.ResourceTemplate{
		Name: "patch", Title: "Run patch", MIMEType: "text/x-diff",
		Description: "A run's extracted patch (patch.diff of the run folder): the one reviewable diff.",
		URITemplate: uriPrefix + "{runId}/patch",
	}, s.readRunFile)
}

// readRunFile serves conductor://runs/RUN/transcript and …/patch from the
// run folder, through os.Root: the run id cannot name anything outside it.
func (s *Server) readRunFile(_ context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	uri := req.Params.URI
	rest, ok := strings.CutPrefix(uri, uriPrefix)
	if !ok {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	runID, what, ok := strings.Cut(rest, "/")
	if !ok || runrec.ValidRunID(runID) != nil {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	var name, mime string
	switch what {
	case "transcript":
		name, mime = runrec.TranscriptFile, "application/x-ndjson"
	case "patch":
		name, mime = runrec.PatchFile, "text/x-diff"
	default:
		return nil, sdk.ResourceNotFoundError(uri)
	}
	root, err := os.OpenRoot(s.o.RunsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	if err != nil {
		return nil, err
	}
	defer root.Close()
	sub, err := root.OpenRoot(runID)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	if err != nil {
		return nil, err
	}
	defer sub.Close()
	b, err := readBounded(sub, name, maxResource)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	if err != nil {
		return nil, err
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: uri, MIMEType: mime, Text: string(b)}}}, nil
}

package fakellm

import (
	"net/http/httptest"

	"github.com/conductor-dev/conductor/runtask/fakellm/modelscript"
)

// Script, Turn and the other script types are defined in modelscript, which
// the replay model shares.
type (
	Script          = modelscript.Script
	Turn            = modelscript.Turn
	ToolCall        = modelscript.ToolCall
	Usage           = modelscript.Usage
	HTTPError       = modelscript.HTTPError
	RecordedRequest = modelscript.RecordedRequest
	ChatRequest     = modelscript.ChatRequest
	Message         = modelscript.Message
	Mismatch        = modelscript.Mismatch
)

// Load reads and validates a script file.
func Load(path string) (*Script, error) { return modelscript.Load(path) }

// Parse decodes and validates a script.
func Parse(data []byte) (*Script, error) { return modelscript.Parse(data) }

// Server is a running scripted model.
type Server struct {
	h   *modelscript.Handler
	srv *httptest.Server
}

// Start serves script on a local port until Close. The script must be valid
// (as Load and Parse return it); Start panics on an invalid one.
func Start(script Script) *Server {
	if err := script.Validate(); err != nil {
		panic("fakellm: invalid script: " + err.Error())
	}
	h := modelscript.NewHandler(&script)
	return &Server{h: h, srv: httptest.NewServer(h)}
}

// URL is the base URL of the OpenAI API, ending in /v1.
func (s *Server) URL() string { return s.srv.URL + "/v1" }

// Requests returns every request received so far, in arrival order.
func (s *Server) Requests() []RecordedRequest { return s.h.Requests() }

// ChatRequests returns the decoded chat completion requests, in order.
func (s *Server) ChatRequests() []*ChatRequest {
	var out []*ChatRequest
	for _, r := range s.h.Requests() {
		if r.Body != nil {
			out = append(out, r.Body)
		}
	}
	return out
}

// Mismatches returns every expectation a request did not meet.
func (s *Server) Mismatches() []Mismatch { return s.h.Mismatches() }

// Unplayed lists the scripted turns never served.
func (s *Server) Unplayed() []int { return s.h.Unplayed() }

// InFlight is the number of chat completions being answered now.
func (s *Server) InFlight() int { return s.h.InFlight() }

// Peak is the most chat completions answered at once (since Start or the
// last ResetPeak): what a concurrency bound across workers is checked by.
func (s *Server) Peak() int { return s.h.Peak() }

// ResetPeak starts a new peak from the requests in flight now.
func (s *Server) ResetPeak() { s.h.ResetPeak() }

// AtPeak lists the chat completions in flight when the peak was reached.
func (s *Server) AtPeak() []RecordedRequest { return s.h.AtPeak() }

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

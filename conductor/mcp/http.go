package mcp

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/conductor-dev/conductor/conductor/refusal"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// HTTPOptions configures streamable HTTP.
type HTTPOptions struct {
	// Addr is host:port to listen on (port 0 picks one).
	Addr string
	// Token is the bearer token every request must carry. Empty is allowed
	// on a loopback address only: a random token is made and printed to
	// Stderr.
	Token string
	// Stderr receives the address and a generated token.
	Stderr io.Writer
	// Ready, if set, receives the listening address once bound.
	Ready func(addr string)
}

// CheckListen refuses a non-loopback address without a token: the tools
// change the store, and anyone who can reach the port could use them.
func CheckListen(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen %q: want host:port (e.g. 127.0.0.1:8765): %w", addr, err)
	}
	if loopback(host) || token != "" {
		return nil
	}
	return refusal.Newf(CodeListenNeedsToken,
		"bind 127.0.0.1 (or ::1), or set a bearer token with --token / CONDUCTOR_MCP_TOKEN",
		"--listen %s is not a loopback address and no token is set", addr)
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Handler is the streamable HTTP endpoint behind the bearer token.
func (s *Server) Handler(token string) http.Handler {
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.mcp }, &sdk.StreamableHTTPOptions{
		Logger: s.o.Log,
		// A client that vanished does not keep its session forever.
		SessionTimeout: time.Hour,
	})
	return requireBearer(token, h)
}

// requireBearer answers 401 without credentials and 403 with wrong ones.
func requireBearer(token string, next http.Handler) http.Handler {
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		got, ok := strings.CutPrefix(auth, "Bearer ")
		if !ok || got == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="conductor mcp"`)
			http.Error(w, "conductor mcp: a bearer token is required (Authorization: Bearer TOKEN)", http.StatusUnauthorized)
			return
		}
		if len(want) == 0 || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			http.Error(w, "conductor mcp: the bearer token is not valid", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ServeHTTP serves streamable HTTP on o.Addr until ctx ends.
func (s *Server) ServeHTTP(ctx context.Context, o HTTPOptions) error {
	if err := CheckListen(o.Addr, o.Token); err != nil {
		return err
	}
	token := o.Token
	generated := token == ""
	if generated {
		token = "cmt-" + randomID(20)
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return fmt.Errorf("mcp: listen %s: %w", o.Addr, err)
	}
	addr := ln.Addr().String()
	if o.Stderr != nil {
		fmt.Fprintf(o.Stderr, "conductor mcp: streamable HTTP on http://%s/\n", addr)
		if generated {
			fmt.Fprintf(o.Stderr, "conductor mcp: bearer token (generated; set CONDUCTOR_MCP_TOKEN to choose one): %s\n", token)
		}
	}
	if o.Ready != nil {
		o.Ready(addr)
	}
	srv := &http.Server{Handler: s.Handler(token), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("mcp: serve %s: %w", addr, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

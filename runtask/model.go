package runtask

import (
	"context"

	openai "github.com/sashabaranov/go-openai"
)

// ModelRequest is one chat completion request of the tool loop.
type ModelRequest struct {
	Messages []openai.ChatCompletionMessage
	Tools    []openai.Tool
}

// Usage is token usage as the server reported it.
type Usage struct {
	PromptTokens     int64 `json:"promptTokens"`
	CompletionTokens int64 `json:"completionTokens"`
	TotalTokens      int64 `json:"totalTokens"`
}

// ModelReply is one normalised model turn: tool-call arguments are JSON
// strings, every call has a unique non-empty id, calls embedded in content
// were lifted into ToolCalls, and FinishReason is "tool_calls" whenever calls
// are present.
type ModelReply struct {
	Message      openai.ChatCompletionMessage
	FinishReason string
	Usage        *Usage // nil when the server did not report usage
	// Model is the model name the server says answered.
	Model string
	// Quirks lists the normalisations applied to this turn (request and
	// answer), e.g. "arguments-object", "missing-id", "calls-in-content",
	// "finish-reason", "usage-missing"; empty for a well-formed answer.
	Quirks []string
}

// ModelClient is the model side of the tool loop: any OpenAI-compatible
// server, or a replayed transcript.
type ModelClient interface {
	Complete(ctx context.Context, req ModelRequest) (ModelReply, error)
}

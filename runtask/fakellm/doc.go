// Package fakellm is an OpenAI-compatible HTTP server for tests that plays a
// scripted conversation and records every request it receives, so tests can
// assert what a model was sent (system prompt, tool results, follow-up
// messages) and that no secret ever reached it.
//
// It speaks the JSON of real servers: POST /v1/chat/completions answers
//
//	{"id", "object": "chat.completion", "created", "model", "system_fingerprint",
//	 "choices": [{"index", "message": {"role", "content",
//	   "tool_calls": [{"id", "type": "function", "function": {"name", "arguments"}}]},
//	   "logprobs", "finish_reason"}],
//	 "usage": {"prompt_tokens", "completion_tokens", "total_tokens"}}
//
// errors answer {"error": {"message", "type", "param", "code"}}, and GET
// /v1/models lists the script's model. A request with "stream": true is
// answered as server-sent events: chat.completion.chunk objects carrying
// the answer in 7-byte pieces (so a client's reassembly is always
// exercised), the usage last when stream_options.include_usage asks for
// it, then "data: [DONE]".
//
// # Script format
//
// A script is JSON: either an array of turns, or an object
//
//	{
//	  "model": "qwen2.5-coder:7b",     // reported model name (default "fakellm")
//	  "mode": "sequential",            // or "history" (see below)
//	  "rejectMissingContent": false,   // answer 400 like Ollama when a message has no content
//	  "requireBearer": "",             // answer 401 unless Authorization: Bearer <this>
//	  "forgetBodies": false,           // record requests without bodies and headers (long runs)
//	  "turns": [ TURN, ... ],
//	  "final": TURN                    // answer once turns run out (default "done", stop)
//	}
//
// A TURN is a reply or an HTTP error:
//
//	{
//	  "name": "read the file",                 // label in mismatches
//	  "expect": ["substring", ...],            // the request must contain these
//	  "expectLast": ["substring", ...],        // ... in its last message
//	  "forbid": ["sk-secret", ...],            // ... and must not contain these
//	  "latencyMs": 50,                         // the answer starts 50 ms after the request arrived
//	  "streamMs": 10,                          // ... and is generated over 10 ms more: streamed, its events spread over them
//	  "content": "text",
//	  "toolCalls": [{"id": "call_1", "name": "read_file", "arguments": {"path": "a.go"}}],
//	  "finishReason": "tool_calls",            // default: tool_calls with calls, else stop; "null" sends null
//	  "usage": {"promptTokens": 10, "completionTokens": 5, "totalTokens": 15},
//	  "quirks": ["arguments-object", ...]
//	}
//	{ "error": {"status": 429, "message": "slow down", "body": "raw body", "retryAfter": "2"} }
//
// Arguments are a JSON object (sent as the JSON string OpenAI uses) or a JSON
// string sent verbatim (to script invalid arguments). Absent usage is
// estimated from the sizes. An unmet expect/expectLast/forbid is recorded as
// a Mismatch (the turn is still played) for the test to check.
//
// Quirks, per turn (see modelscript.Quirks):
//
//	arguments-object       arguments as a JSON object, not a string (llama.cpp)
//	missing-ids            tool calls without "id" (llama.cpp)
//	duplicate-ids          every call has id "call_0"
//	uuid-ids               bare UUID ids without "call_" (mlx_lm.server)
//	missing-type           tool calls without "type"
//	calls-in-content-tag   calls written as <tool_call>{"name":..,"arguments":{..}}</tool_call>
//	                       in content, no tool_calls, finish_reason stop (Ollama, Qwen)
//	calls-in-content-json  calls written as bare JSON in content (vLLM with a wrong parser)
//	legacy-function-call   message.function_call, finish_reason function_call
//	no-usage               no "usage" object
//	garbage                a 200 answer with an HTML body
//
// finish_reason variants ("tool_call", "stop" with calls, "function_call")
// are scripted with finishReason.
//
// Modes: "sequential" answers requests with the turns in arrival order.
// "history" answers with the reply turn whose index is the number of
// assistant messages already in the request, so concurrent sessions and
// resumed sessions each get the right turn; error turns scripted before a
// reply are served once per distinct conversation state, then the reply.
//
// The same format drives runtask's replay model ("replay:FILE").
package fakellm

package runtask

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Quirk fixes, as listed in ModelReply.Quirks and the debug log.
const (
	FixArgumentsObject = "arguments-object" // arguments sent as a JSON value, turned into a string
	FixArgumentsAbsent = "arguments-absent" // no arguments: "{}"
	FixMissingID       = "missing-id"       // a call without id got call_<n>
	FixDuplicateID     = "duplicate-id"     // a call id seen before got call_<n>
	FixMissingType     = "missing-type"     // a call without type got "function"
	FixCallsInContent  = "calls-in-content" // calls written in content were lifted into tool_calls
	FixFunctionCall    = "legacy-function-call"
	FixFinishReason    = "finish-reason"     // finish_reason rewritten
	FixUsageMissing    = "usage-missing"     // no usage reported: Usage is nil
	FixThinkInContent  = "think-in-content"  // a leading <think> block moved from content to reasoning_content
	FixContentAbsent   = "content-absent"    // request: a message without content got ""
	FixEmptyToolResult = "empty-tool-result" // request: an empty tool result got a placeholder
)

// EmptyToolResult replaces an empty tool result in requests: some servers
// drop or reject empty tool messages, and models read silence badly.
const EmptyToolResult = "(no output)"

// chatRequestInfo is what the response normaliser needs to know about the
// request it answers.
type chatRequestInfo struct {
	priorIDs map[string]bool // tool call ids already in the conversation
	tools    map[string]bool // names of the tools offered
}

// normalizeChatRequest rewrites a chat completion request body for servers'
// needs: every message carries "content" (go-openai omits an empty one and
// Ollama then answers 400), an empty tool result becomes EmptyToolResult, and
// temperature is set when given (go-openai cannot send 0). Other fields pass
// through unchanged.
func normalizeChatRequest(body []byte, temperature *float64, stream bool) ([]byte, chatRequestInfo, []string, error) {
	info := chatRequestInfo{priorIDs: map[string]bool{}, tools: map[string]bool{}}
	// The body is read once, value by value: the conversation is most of
	// it and it is sent again on every step, so each message is decoded
	// once into what is looked at, and passes on as the bytes it came as
	// unless it needs a fix.
	notObject := func(err error) error { return fmt.Errorf("chat request is not a JSON object: %w", err) }
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil {
		return nil, info, nil, notObject(err)
	} else if tok != json.Delim('{') {
		return nil, info, nil, notObject(fmt.Errorf("it starts with %v", tok))
	}
	top := map[string]json.RawMessage{}
	var fixes []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, info, nil, notObject(err)
		}
		key, _ := tok.(string)
		if key != "messages" {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, info, nil, notObject(err)
			}
			top[key] = raw
			continue
		}
		msgs, msgFixes, err := normalizeMessages(dec, body, info)
		if err != nil {
			return nil, info, nil, err
		}
		top[key], fixes = msgs, append(fixes, msgFixes...)
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, info, nil, notObject(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, info, nil, notObject(errors.New("data after the object"))
	}
	var tools []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if raw, ok := top["tools"]; ok && json.Unmarshal(raw, &tools) == nil {
		for _, t := range tools {
			if t.Function.Name != "" {
				info.tools[t.Function.Name] = true
			}
		}
	}
	if temperature != nil {
		top["temperature"] = mustJSON(*temperature)
	}
	if stream {
		// Usage comes in a last chunk only when asked for.
		top["stream"] = json.RawMessage("true")
		top["stream_options"] = json.RawMessage(`{"include_usage":true}`)
	}
	return encodeObject(top), info, fixes, nil
}

// normalizeMessages reads the messages array at dec's position in body:
// each message is decoded once, its tool call ids go into info, and the
// array is returned with the messages that need a fix rewritten (the
// others as they came) and the fixes made.
func normalizeMessages(dec *json.Decoder, body []byte, info chatRequestInfo) (json.RawMessage, []string, error) {
	tok, err := dec.Token()
	switch {
	case err != nil:
		return nil, nil, fmt.Errorf("chat request messages: %w", err)
	case tok == nil:
		return json.RawMessage("null"), nil, nil
	case tok != json.Delim('['):
		return nil, nil, fmt.Errorf("chat request messages: not an array (%v)", tok)
	}
	var msgs []json.RawMessage
	var fixes []string
	for i := 0; dec.More(); i++ {
		start := dec.InputOffset()
		var m requestMessage
		if err := dec.Decode(&m); err != nil {
			return nil, nil, fmt.Errorf("chat request message %d: %w", i, err)
		}
		// The value's bytes, without the comma and spaces before it.
		el := json.RawMessage(bytes.TrimLeft(body[start:dec.InputOffset()], " \t\r\n,"))
		if el[0] != '{' { // null decodes into a map too
			return nil, nil, fmt.Errorf("chat request message %d: %s is not a message object", i, snippet(el, 20))
		}
		if raw, ok := m["tool_calls"]; ok {
			var calls []struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(raw, &calls); err != nil {
				return nil, nil, fmt.Errorf("chat request message %d: tool_calls: %w", i, err)
			}
			for _, c := range calls {
				if c.ID != "" {
					info.priorIDs[c.ID] = true
				}
			}
		}
		el, fix := fixMessage(el, m)
		if fix != "" {
			fixes = appendFix(fixes, fix)
		}
		msgs = append(msgs, el)
	}
	if _, err := dec.Token(); err != nil { // the closing bracket
		return nil, nil, fmt.Errorf("chat request messages: %w", err)
	}
	return encodeArray(msgs), fixes, nil
}

// requestMessage is a request's message as normalizeChatRequest reads it:
// its fields by their exact names (encoding/json would match a struct's
// fields whatever their case; a server does not).
type requestMessage map[string]json.RawMessage

func (m requestMessage) role() string {
	var r string
	_ = json.Unmarshal(m["role"], &r)
	return r
}

// fixMessage returns one request message as it goes out, and names the
// fix (none when it needed none, or when only a model's reasoning was
// dropped): a model's earlier reasoning is not sent back (servers that
// return it, DeepSeek, refuse it in a request, and it costs context), every
// message gets a content, and an empty tool result gets EmptyToolResult.
// raw is a JSON object, m what it decoded to (fixMessage may change m).
func fixMessage(raw json.RawMessage, m requestMessage) (json.RawMessage, string) {
	content, has := m["content"]
	_, reasoning := m["reasoning_content"]
	null := has && isJSONNull(content)
	emptyText := has && bytes.Equal(bytes.TrimSpace(content), []byte(`""`))
	if has && !null && !emptyText && !reasoning {
		return raw, "" // the usual message: sent as it came
	}
	role := m.role()
	switch {
	case emptyText && !reasoning && role != "tool":
		return raw, ""
	case !has && !reasoning && role != "tool":
		// The usual fix, go-openai's assistant message with calls and no
		// content: "content" goes first, the rest as it came.
		rest := bytes.TrimSpace(raw[1:]) // after the brace
		if rest[0] == '}' {
			return json.RawMessage(`{"content":""}`), FixContentAbsent
		}
		return append([]byte(`{"content":"",`), rest...), FixContentAbsent
	}
	delete(m, "reasoning_content")
	fix := ""
	switch {
	case role == "tool" && (!has || null || emptyText):
		m["content"], fix = mustJSON(EmptyToolResult), FixEmptyToolResult
	case !has || null:
		m["content"], fix = json.RawMessage(`""`), FixContentAbsent
	}
	return encodeObject(m), fix
}

// encodeArray writes elems, each a JSON value, as a JSON array.
func encodeArray(elems []json.RawMessage) json.RawMessage {
	size := 2
	for _, e := range elems {
		size += len(e) + 1
	}
	out := make([]byte, 0, size)
	out = append(out, '[')
	for i, e := range elems {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, bytes.TrimSpace(e)...)
	}
	return append(out, ']')
}

// encodeObject writes obj as a JSON object, keys sorted, each value as it
// is: the values were decoded from JSON (or made by mustJSON), so they need
// no second validation pass.
func encodeObject(obj map[string]json.RawMessage) []byte {
	keys := make([]string, 0, len(obj))
	size := 2
	for k, v := range obj {
		keys = append(keys, k)
		size += len(k) + len(v) + 4
	}
	sort.Strings(keys)
	out := make([]byte, 0, size)
	out = append(out, '{')
	for i, k := range keys {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, mustJSON(k)...)
		out = append(out, ':')
		out = append(out, bytes.TrimSpace(obj[k])...)
	}
	return append(out, '}')
}

// chatResponseInfo is what normalising a response learned.
type chatResponseInfo struct {
	usagePresent bool
	fixes        []string
	finishRaw    string // finish_reason as the server sent it (first choice)
}

// notJSONError is a 2xx answer whose body is not a JSON object.
type notJSONError struct {
	status      int
	contentType string
	snippet     string
}

func (e *notJSONError) Error() string {
	ct := e.contentType
	if ct == "" {
		ct = "no content type"
	}
	return fmt.Sprintf("answer is not JSON (%s): %q", ct, e.snippet)
}

// snippet is the start of a body for an error message: at most n bytes,
// valid UTF-8.
func snippet(b []byte, n int) string {
	b = bytes.TrimSpace(b)
	if len(b) > n {
		b = append(bytes.ToValidUTF8(b[:n], nil), "…"...)
	}
	return string(bytes.ToValidUTF8(b, []byte("?")))
}

// normalizeChatResponse rewrites a chat completion answer into the shape
// go-openai decodes and the tool loop expects: every tool call has a string
// "arguments", a "type" and an id unique in the conversation; calls written
// in content (<tool_call> tags, or bare JSON naming an offered tool) and
// legacy function_call are lifted into tool_calls; finish_reason is
// "tool_calls" whenever calls are present. It reports whether "usage" was
// present (go-openai turns a missing usage into zeros).
//
// Each server quirk has its own function below, named for what it fixes;
// this one is the order they run in.
func normalizeChatResponse(body []byte, req chatRequestInfo) ([]byte, chatResponseInfo, error) {
	var info chatResponseInfo
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, info, err
	}
	foldKeys(top, "choices", "usage")
	info.noteUsage(top)
	var choices []map[string]json.RawMessage
	if raw, ok := top["choices"]; ok && !isJSONNull(raw) {
		if err := json.Unmarshal(raw, &choices); err != nil {
			return nil, info, fmt.Errorf("choices: %w", err)
		}
	}
	if len(choices) == 0 {
		if err := errorWithOK(body); err != nil {
			return nil, info, err
		}
	}
	ids := newCallIDs(req.priorIDs)
	for ci, ch := range choices {
		if err := info.normalizeChoice(ci, ch, req, ids); err != nil {
			return nil, info, err
		}
	}
	if choices != nil {
		top["choices"] = mustJSON(choices)
	}
	out, err := json.Marshal(top)
	return out, info, err
}

// fix records a quirk fixed (once).
func (info *chatResponseInfo) fix(f string) { info.fixes = appendFix(info.fixes, f) }

// noteUsage: servers that send no "usage" (go-openai would read zeros).
func (info *chatResponseInfo) noteUsage(top map[string]json.RawMessage) {
	if u, ok := top["usage"]; ok && !isJSONNull(u) {
		info.usagePresent = true
	} else {
		info.fix(FixUsageMissing)
	}
}

// errorWithOK: proxies that answer an error object with HTTP 200. It
// returns that error, or nil when the body holds none.
func errorWithOK(body []byte) error {
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || len(e.Error) == 0 || isJSONNull(e.Error) {
		return nil
	}
	var obj struct {
		Message string `json:"message"`
	}
	msg := snippet(e.Error, 300)
	if json.Unmarshal(e.Error, &obj) == nil && obj.Message != "" {
		msg = obj.Message
	} else if s := ""; json.Unmarshal(e.Error, &s) == nil && s != "" {
		msg = s
	}
	return fmt.Errorf("the server answered an error: %s", msg)
}

// callIDs hands out tool call ids unique in the conversation.
type callIDs struct {
	used map[string]bool
	next int
}

func newCallIDs(prior map[string]bool) *callIDs {
	used := map[string]bool{}
	for id := range prior {
		used[id] = true
	}
	return &callIDs{used: used, next: len(used) + 1}
}

func (c *callIDs) fresh() string {
	for {
		id := "call_" + strconv.Itoa(c.next)
		c.next++
		if !c.used[id] {
			c.used[id] = true
			return id
		}
	}
}

// normalizeChoice fixes one choice's message, its tool calls and its
// finish_reason in place.
func (info *chatResponseInfo) normalizeChoice(ci int, ch map[string]json.RawMessage, req chatRequestInfo, ids *callIDs) error {
	foldKeys(ch, "message", "finish_reason")
	msg := map[string]json.RawMessage{}
	if raw, ok := ch["message"]; ok && !isJSONNull(raw) {
		if err := json.Unmarshal(raw, &msg); err != nil {
			return fmt.Errorf("choices[%d].message: %w", ci, err)
		}
	}
	foldKeys(msg, "role", "content", "tool_calls", "function_call")
	info.liftThinking(msg)
	var calls []map[string]json.RawMessage
	if raw, ok := msg["tool_calls"]; ok && !isJSONNull(raw) {
		if err := json.Unmarshal(raw, &calls); err != nil {
			return fmt.Errorf("choices[%d].message.tool_calls: %w", ci, err)
		}
	}
	calls = info.liftFunctionCall(msg, calls)
	if len(calls) == 0 {
		calls = info.liftContentCalls(msg, req.tools)
	}
	for _, c := range calls {
		if err := info.normalizeToolCall(c, ids); err != nil {
			return fmt.Errorf("choices[%d].message.tool_calls: %w", ci, err)
		}
	}
	if len(calls) > 0 {
		msg["tool_calls"] = mustJSON(calls)
	} else {
		delete(msg, "tool_calls")
	}
	defaultRoleAndTextContent(msg)
	ch["message"] = mustJSON(msg)
	info.fixFinishReason(ch, ci == 0, len(calls) > 0)
	return nil
}

// liftThinking: a reasoning model's thinking, written into content by
// servers without a reasoning parser. It is not the answer, and tool calls
// it mentions are not calls: it moves to reasoning_content.
func (info *chatResponseInfo) liftThinking(msg map[string]json.RawMessage) {
	var content string
	if json.Unmarshal(msg["content"], &content) != nil {
		return
	}
	rest, think, ok := splitThink(content)
	if !ok {
		return
	}
	msg["content"] = mustJSON(rest)
	var prior string
	_ = json.Unmarshal(msg["reasoning_content"], &prior)
	if prior == "" {
		msg["reasoning_content"] = mustJSON(think)
	}
	info.fix(FixThinkInContent)
}

// liftFunctionCall: the legacy function_call, read as the one tool call
// when there are none (and dropped either way).
func (info *chatResponseInfo) liftFunctionCall(msg map[string]json.RawMessage, calls []map[string]json.RawMessage) []map[string]json.RawMessage {
	fc, ok := msg["function_call"]
	if !ok || isJSONNull(fc) {
		return calls
	}
	if len(calls) == 0 {
		calls = []map[string]json.RawMessage{{"function": fc}}
		info.fix(FixFunctionCall)
	}
	delete(msg, "function_call")
	return calls
}

// liftContentCalls: tool calls written into content (<tool_call> tags, or
// bare JSON naming an offered tool) by servers without a tool parser.
func (info *chatResponseInfo) liftContentCalls(msg map[string]json.RawMessage, tools map[string]bool) []map[string]json.RawMessage {
	var content string
	if json.Unmarshal(msg["content"], &content) != nil || content == "" {
		return nil
	}
	rest, lifted := liftContentCalls(content, tools)
	if len(lifted) == 0 {
		return nil
	}
	msg["content"] = mustJSON(rest)
	info.fix(FixCallsInContent)
	return lifted
}

// normalizeToolCall: a call without an id, with an id used before, without
// a type, or with arguments that are an object or absent.
func (info *chatResponseInfo) normalizeToolCall(c map[string]json.RawMessage, ids *callIDs) error {
	foldKeys(c, "id", "type", "function", "index")
	var id string
	_ = json.Unmarshal(c["id"], &id)
	switch {
	case id == "":
		c["id"] = mustJSON(ids.fresh())
		info.fix(FixMissingID)
	case ids.used[id]:
		c["id"] = mustJSON(ids.fresh())
		info.fix(FixDuplicateID)
	default:
		ids.used[id] = true
	}
	var typ string
	if json.Unmarshal(c["type"], &typ) != nil || typ == "" {
		c["type"] = mustJSON("function")
		info.fix(FixMissingType)
	}
	fn := map[string]json.RawMessage{}
	if raw, ok := c["function"]; ok && !isJSONNull(raw) {
		if err := json.Unmarshal(raw, &fn); err != nil {
			return fmt.Errorf("function: %w", err)
		}
	}
	foldKeys(fn, "name", "arguments")
	args, fix := argumentsString(fn["arguments"])
	if fix != "" {
		info.fix(fix)
	}
	fn["arguments"] = mustJSON(args)
	c["function"] = mustJSON(fn)
	delete(c, "index") // a streaming field; meaningless here
	return nil
}

// defaultRoleAndTextContent: an answer without a role, or with multi-part
// content (rare in answers; the text is kept).
func defaultRoleAndTextContent(msg map[string]json.RawMessage) {
	if _, ok := msg["role"]; !ok {
		msg["role"] = mustJSON("assistant")
	}
	if c, ok := msg["content"]; ok && !isJSONNull(c) {
		var s string
		if json.Unmarshal(c, &s) != nil {
			msg["content"] = mustJSON(contentPartsText(c))
		}
	}
}

// fixFinishReason: finish_reason missing, or not "tool_calls" when there
// are calls, or a calls variant ("tool_call", "function_call") when there
// are none. first records the server's value of the first choice.
func (info *chatResponseInfo) fixFinishReason(ch map[string]json.RawMessage, first, hasCalls bool) {
	var finish string
	_ = json.Unmarshal(ch["finish_reason"], &finish)
	if first {
		info.finishRaw = finish
	}
	want := finish
	switch {
	case hasCalls:
		want = "tool_calls"
	case finish == "", finish == "tool_call", finish == "tool_calls", finish == "function_call":
		want = "stop"
	}
	if want != finish {
		info.fix(FixFinishReason)
	}
	ch["finish_reason"] = mustJSON(want)
}

// argumentsString turns a call's arguments into the JSON string OpenAI
// sends: a string stays as is (even if it is not valid JSON: the loop tells
// the model), an object or other value is compacted, absent is "{}".
func argumentsString(raw json.RawMessage) (string, string) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || isJSONNull(raw) {
		return "{}", FixArgumentsAbsent
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			if strings.TrimSpace(s) == "" {
				return "{}", FixArgumentsAbsent
			}
			return s, ""
		}
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return string(raw), FixArgumentsObject
	}
	return buf.String(), FixArgumentsObject
}

var (
	toolCallTag   = regexp.MustCompile(`(?s)<tool_call>\s*(.*?)\s*(?:</tool_call>|$)`)
	jsonFence     = regexp.MustCompile("(?s)^```(?:json)?\\s*(.*?)\\s*```$")
	contentCallOK = map[string]bool{"name": true, "arguments": true, "parameters": true, "type": true, "id": true, "function": true}
)

// splitThink splits a leading thinking block off content: "<think>…</think>"
// at the start (after white space), or — where a server's template already
// sent the opening tag — text up to a first "</think>" with no "<think>"
// before it. ok is false when there is none.
func splitThink(content string) (rest, think string, ok bool) {
	const open, closing = "<think>", "</think>"
	trimmed := strings.TrimLeft(content, " \t\r\n")
	end := strings.Index(trimmed, closing)
	if end < 0 {
		return content, "", false
	}
	body := trimmed[:end]
	if after, found := strings.CutPrefix(body, open); found {
		body = after
	} else if strings.Contains(body, open) {
		return content, "", false
	}
	return strings.TrimLeft(trimmed[end+len(closing):], " \t\r\n"), strings.TrimSpace(body), true
}

// liftContentCalls finds tool calls a model wrote into its content instead
// of tool_calls: <tool_call>{"name":..,"arguments":{..}}</tool_call> blocks
// (Hermes/Qwen templates; a missing closing tag at the end is accepted), or
// a content that is only a JSON call object or array of them, optionally in
// a ```json fence or after a [TOOL_CALLS] or <|python_tag|> marker, naming
// tools the request offered. It returns the content
// left over and the calls; no calls when nothing parses.
func liftContentCalls(content string, tools map[string]bool) (string, []map[string]json.RawMessage) {
	if strings.Contains(content, "<tool_call>") {
		var calls []map[string]json.RawMessage
		rest := toolCallTag.ReplaceAllStringFunc(content, func(block string) string {
			m := toolCallTag.FindStringSubmatch(block)
			c, ok := parseContentCall([]byte(m[1]))
			if !ok {
				return block // leave what does not parse for the model to see
			}
			calls = append(calls, c)
			return ""
		})
		if len(calls) > 0 {
			return strings.TrimSpace(rest), calls
		}
		return content, nil
	}
	if len(tools) == 0 {
		return content, nil
	}
	text := strings.TrimSpace(content)
	if m := jsonFence.FindStringSubmatch(text); m != nil {
		text = m[1]
	}
	// Prefixes of chat templates whose parser was not enabled: Mistral's
	// [TOOL_CALLS][...] and Llama 3.1's <|python_tag|>{...}.
	for _, prefix := range []string{"[TOOL_CALLS]", "<|python_tag|>"} {
		if rest, ok := strings.CutPrefix(text, prefix); ok {
			text = strings.TrimSpace(rest)
		}
	}
	if text == "" || (text[0] != '{' && text[0] != '[') {
		return content, nil
	}
	var items []json.RawMessage
	if text[0] == '[' {
		if json.Unmarshal([]byte(text), &items) != nil || len(items) == 0 {
			return content, nil
		}
	} else {
		items = []json.RawMessage{json.RawMessage(text)}
	}
	var calls []map[string]json.RawMessage
	for _, it := range items {
		c, ok := parseContentCall(it)
		if !ok {
			return content, nil
		}
		var fn struct {
			Name string `json:"name"`
		}
		_ = json.Unmarshal(c["function"], &fn)
		if !tools[fn.Name] {
			return content, nil // JSON the model meant as an answer
		}
		calls = append(calls, c)
	}
	return "", calls
}

// parseContentCall parses {"name": .., "arguments"|"parameters": ..} or the
// OpenAI shape {"type":"function","function":{"name":..,"arguments":..}}
// into a tool call object.
func parseContentCall(b []byte) (map[string]json.RawMessage, bool) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(bytes.TrimSpace(b), &obj) != nil {
		return nil, false
	}
	for k := range obj {
		if !contentCallOK[k] {
			return nil, false
		}
	}
	if fn, ok := obj["function"]; ok {
		var inner map[string]json.RawMessage
		if json.Unmarshal(fn, &inner) != nil {
			return nil, false
		}
		obj = inner
	}
	var name string
	if json.Unmarshal(obj["name"], &name) != nil || name == "" {
		return nil, false
	}
	args, ok := obj["arguments"]
	if !ok {
		args = obj["parameters"]
	}
	fn := map[string]json.RawMessage{"name": mustJSON(name)}
	if args != nil {
		fn["arguments"] = args
	}
	return map[string]json.RawMessage{"type": mustJSON("function"), "function": mustJSON(fn)}, true
}

func contentPartsText(raw json.RawMessage) string {
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return string(raw)
	}
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		texts = append(texts, p.Text)
	}
	return strings.Join(texts, "\n")
}

// foldKeys renames keys that match names case-insensitively to the exact
// name (encoding/json, and so go-openai, matches keys that way) and drops
// the duplicates, so what we normalise is what go-openai reads.
func foldKeys(m map[string]json.RawMessage, names ...string) {
	for _, name := range names {
		for k, v := range m {
			if k == name || !strings.EqualFold(k, name) {
				continue
			}
			if _, exact := m[name]; !exact {
				m[name] = v
			}
			delete(m, k)
		}
	}
}

func isJSONNull(raw json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

func mustJSON(v any) json.RawMessage {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err) // only called with values that always encode
	}
	return json.RawMessage(bytes.TrimRight(buf.Bytes(), "\n"))
}

func appendFix(fixes []string, f string) []string {
	for _, x := range fixes {
		if x == f {
			return fixes
		}
	}
	return append(fixes, f)
}

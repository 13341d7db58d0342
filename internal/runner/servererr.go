package runner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"
)

// serverErrorText returns the message of a model server's error answer,
// bounded and printable, or "" when body says nothing: Ollama's
// {"error":"model 'x' not found"}, the OpenAI shape {"error":{"message":
// ...}} that llama.cpp and mlx-lm answer, {"message": ...}, else the body
// itself as text. Control characters and invalid UTF-8 become spaces,
// runs of spaces one, and the text is cut at maxServerErrorTextBytes on a
// rune boundary ("..." marks the cut). The body is untrusted: nothing in
// it is more than text to show.
func serverErrorText(body []byte) string {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return ""
	}
	text := string(body)
	var obj struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if body[0] == '{' && json.Unmarshal(body, &obj) == nil {
		var s string
		var nested struct {
			Message string `json:"message"`
		}
		switch {
		case json.Unmarshal(obj.Error, &s) == nil && s != "":
			text = s
		case json.Unmarshal(obj.Error, &nested) == nil && nested.Message != "":
			text = nested.Message
		case obj.Message != "":
			text = obj.Message
		}
	}
	return boundText(text, maxServerErrorTextBytes)
}

// boundText makes s printable on one line (control characters and invalid
// UTF-8 as spaces, runs of spaces as one, trimmed) and cuts it to at most
// max bytes on a rune boundary, ending in "..." when cut.
func boundText(s string, max int) string {
	var b strings.Builder
	space := false
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			r = ' '
		}
		if r == ' ' {
			if space {
				continue
			}
			space = true
		} else {
			space = false
		}
		b.WriteRune(r)
		if b.Len() > max {
			break
		}
	}
	out := strings.TrimSpace(b.String())
	if len(out) <= max {
		return out
	}
	const mark = "..."
	cut := max - len(mark)
	for cut > 0 && !utf8.RuneStart(out[cut]) {
		cut--
	}
	return strings.TrimSpace(out[:cut]) + mark
}

// statusError is the error of a model server's answer with an unexpected
// status: "<what>: HTTP <code>", then ": <its error text>" when the
// answer's body has one (read up to maxServerErrorBodyBytes).
func statusError(what string, resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxServerErrorBodyBytes))
	if text := serverErrorText(body); text != "" {
		return fmt.Errorf("%s: HTTP %d: %s", what, resp.StatusCode, text)
	}
	return fmt.Errorf("%s: HTTP %d", what, resp.StatusCode)
}

package message

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
)

// The generic tree built by parse. A value is one of *object, *array,
// string, json.Number, bool or nil (JSON null).
type (
	object struct {
		members []member // in document order; keys are unique
	}
	member struct {
		key string
		val any
		raw []byte // the member's value exactly as it appears in the input
	}
	array struct {
		elems []any
	}
)

// get returns the value of key and whether it is present.
func (o *object) get(key string) (any, bool) {
	for _, m := range o.members {
		if m.key == key {
			return m.val, true
		}
	}
	return nil, false
}

// find returns the member named key, or nil.
func (o *object) find(key string) *member {
	for i := range o.members {
		if o.members[i].key == key {
			return &o.members[i]
		}
	}
	return nil
}

// maxDepth bounds the nesting of objects and arrays. A valid message nests
// two levels deep; the bound only keeps hostile input cheap to handle.
const maxDepth = 32

// frame is one open object or array during parsing.
type frame struct {
	obj     *object
	arr     *array
	path    string
	seen    map[string]struct{} // keys of obj seen so far
	wantKey bool                // obj: the next token is a key or '}'
	keyEnd  int64               // obj: input offset just after the current key
}

// childPath returns the path of the value that comes next in f.
func (f *frame) childPath() string {
	if f.arr != nil {
		return f.path + "[" + strconv.Itoa(len(f.arr.elems)) + "]"
	}
	return joinPath(f.path, f.obj.members[len(f.obj.members)-1].key)
}

// parse reads exactly one JSON value from raw with encoding/json's tokenizer
// and returns it as a tree. Unlike json.Unmarshal it rejects duplicate keys
// (anywhere, after unescaping), nesting deeper than maxDepth and anything
// but whitespace after the value. With wantObject, a top-level value that is
// not an object is reported as CodeNotObject. raw must be valid UTF-8.
func parse(raw []byte, wantObject bool) (any, *Error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var (
		stack []*frame
		root  any
		first = true
	)
	// closeValue records the end of a value just completed in the frame on
	// top of the stack, and reports whether that was the root.
	closeValue := func(end int64) bool {
		if len(stack) == 0 {
			return true
		}
		if top := stack[len(stack)-1]; top.obj != nil {
			m := &top.obj.members[len(top.obj.members)-1]
			m.raw = bytes.TrimLeft(raw[top.keyEnd:end], " \t\r\n:")
			top.wantKey = true
		}
		return false
	}
	for {
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, tokenError(err, raw, first)
		}
		first = false

		if top != nil && top.wantKey {
			if _, ok := tok.(json.Delim); ok { // '}': Token checks nesting
				stack = stack[:len(stack)-1]
				if closeValue(dec.InputOffset()) {
					break
				}
				continue
			}
			key, ok := tok.(string) // Token returns only strings in key position
			if !ok {
				return nil, newError(CodeSyntax, "", "invalid JSON: object key is not a string at byte offset %d", dec.InputOffset())
			}
			if _, dup := top.seen[key]; dup {
				return nil, newError(CodeDuplicateKey, joinPath(top.path, key),
					"duplicate key: it occurs more than once in the same object, and only one value can be used")
			}
			top.seen[key] = struct{}{}
			top.obj.members = append(top.obj.members, member{key: key})
			top.wantKey = false
			top.keyEnd = dec.InputOffset()
			continue
		}

		if top == nil && wantObject && tok != json.Delim('{') { // the first token
			return nil, newError(CodeNotObject, "", "a message must be a JSON object, got %s", describeWhole(scalarOrContainer(tok)))
		}
		if d, ok := tok.(json.Delim); ok {
			if d == ']' {
				stack = stack[:len(stack)-1]
				if closeValue(dec.InputOffset()) {
					break
				}
				continue
			}
			// '{' or '['; a '}' here is impossible as Token checks nesting.
			f := &frame{}
			var v any
			if d == '{' {
				f.obj = &object{}
				f.seen = make(map[string]struct{})
				f.wantKey = true
				v = f.obj
			} else {
				f.arr = &array{}
				v = f.arr
			}
			if top == nil {
				root = v
			} else {
				f.path = top.childPath()
				top.attach(v)
			}
			if len(stack) >= maxDepth {
				return nil, newError(CodeInvalid, f.path, "objects and arrays are nested more than %d levels deep", maxDepth)
			}
			stack = append(stack, f)
			continue
		}
		// A scalar.
		if top == nil {
			root = tok
			break
		}
		top.attach(tok)
		if top.obj != nil {
			closeValue(dec.InputOffset())
		}
	}
	end := dec.InputOffset()
	if i := bytes.IndexFunc(raw[end:], func(r rune) bool {
		return r != ' ' && r != '\t' && r != '\r' && r != '\n'
	}); i >= 0 {
		return nil, newError(CodeSyntax, "", "unexpected data at byte offset %d after the end of the top-level value", end+int64(i))
	}
	return root, nil
}

// attach adds v as the next value of f.
func (f *frame) attach(v any) {
	if f.arr != nil {
		f.arr.elems = append(f.arr.elems, v)
		return
	}
	f.obj.members[len(f.obj.members)-1].val = v
}

// scalarOrContainer maps an opening delimiter to an empty container of its
// kind, so that describe can name it.
func scalarOrContainer(tok json.Token) any {
	switch tok {
	case json.Delim('{'):
		return &object{}
	case json.Delim('['):
		return &array{}
	}
	return tok
}

// scannerEOF is the message of encoding/json's error for input that ends
// in the middle of a value.
var scannerEOF = func() string {
	err := json.Unmarshal([]byte("{"), new(json.RawMessage))
	if err == nil {
		return ""
	}
	return err.Error()
}()

// tokenError converts an error from json.Decoder.Token into an *Error.
func tokenError(err error, raw []byte, first bool) *Error {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		// The tokenizer's offsets and messages are vague; the scanner behind
		// json.Unmarshal reports the offending byte precisely.
		if verr := json.Unmarshal(raw, new(json.RawMessage)); errors.As(verr, &se) {
			if se.Error() == scannerEOF {
				return newError(CodeSyntax, "", "invalid JSON: unexpected end of input at byte offset %d", len(raw))
			}
			return newError(CodeSyntax, "", "invalid JSON at byte offset %d: %s", se.Offset-1, se.Error())
		}
		return newError(CodeSyntax, "", "invalid JSON: %s", err.Error())
	case first && errors.Is(err, io.EOF):
		return newError(CodeSyntax, "", "message is empty")
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return newError(CodeSyntax, "", "invalid JSON: unexpected end of input at byte offset %d", len(raw))
	}
	return newError(CodeSyntax, "", "invalid JSON: %s", err.Error())
}

// joinPath appends key to the JSON path parent. Keys that are plain
// identifiers are joined with a dot; others are written as ["key"].
func joinPath(parent, key string) string {
	if plainKey(key) {
		if parent == "" {
			return key
		}
		return parent + "." + key
	}
	return parent + "[" + quote(key) + "]"
}

func plainKey(key string) bool {
	if key == "" || len(key) > maxEcho {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !isAlnum(c) && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// describeWhole is describe for a value that should have held a whole
// message or its data: a string there is most often one encoded twice, with
// customer fields inside, so its content is not repeated.
func describeWhole(v any) string {
	if _, ok := v.(string); ok {
		return "a string (a JSON object encoded as a string?)"
	}
	return describe(v)
}

// describe names a value's JSON type, with the value itself for scalars,
// for use after "got".
func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(v)
	case json.Number:
		return "number " + literal(string(v))
	case string:
		return "string " + quote(v)
	case *object:
		return "an object"
	case *array:
		return "an array"
	}
	return "an unexpected value"
}

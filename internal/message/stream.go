package message

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// DecodeStream decodes the messages of types read from r and calls fn for each, in
// order. The input is either one JSON message, possibly pretty-printed over
// many lines, or JSON lines: one message per line, with blank lines skipped.
// The first non-blank line decides which: if it opens an object or array
// that it does not close, the rest of the input is one message; otherwise
// every line is a message of its own.
//
// fn receives the 1-based line number on which the message starts, the
// message's bytes (without the line terminator; fn may keep them), and
// either the decoded message or the *Error that Decode would return for it.
// A message that fails to decode, including one longer than MaxSize, is
// reported to fn and decoding carries on with the next line; for a message
// longer than MaxSize raw is nil, as it is not kept.
//
// DecodeStream returns nil at the end of the input, the first error returned
// by fn, or an error from reading r.
func DecodeStream(r io.Reader, types Types, fn func(line int, raw []byte, m *Message, err error) error) error {
	lr := &lineReader{br: bufio.NewReaderSize(r, MaxSize+2)}
	multi := false // whether the format is decided: JSON lines
	lineNo := 0
	for {
		line, over, err := lr.next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("message: reading line %d: %w", lineNo+1, err)
		}
		lineNo++
		if over > 0 {
			multi = true
			if err := fn(lineNo, nil, nil, tooLarge(over)); err != nil {
				return err
			}
			continue
		}
		content := trimEOL(line)
		if len(bytes.Trim(content, " \t\r")) == 0 {
			continue
		}
		if !multi && opensMultiline(content) {
			return decodeDocument(lr.br, line, lineNo, types, fn)
		}
		multi = true
		if err := report(fn, lineNo, content, types); err != nil {
			return err
		}
	}
}

// decodeDocument decodes the rest of the input as a single message whose
// first line, with its terminator, is first.
func decodeDocument(br *bufio.Reader, first []byte, lineNo int, types Types, fn func(int, []byte, *Message, error) error) error {
	buf := first
	rest, err := io.ReadAll(io.LimitReader(br, int64(MaxSize+1-len(buf))))
	if err != nil {
		return fmt.Errorf("message: reading the message starting on line %d: %w", lineNo, err)
	}
	buf = append(buf, rest...)
	if len(buf) > MaxSize {
		n, err := io.Copy(io.Discard, br)
		if err != nil {
			return fmt.Errorf("message: reading the message starting on line %d: %w", lineNo, err)
		}
		return fn(lineNo, nil, nil, tooLarge(int64(len(buf))+n))
	}
	return report(fn, lineNo, bytes.TrimRight(buf, " \t\r\n"), types)
}

// report decodes raw, which it owns, and passes the result to fn.
func report(fn func(int, []byte, *Message, error) error, lineNo int, raw []byte, types Types) error {
	raw = raw[:len(raw):len(raw)]
	m, err := decode(raw, types)
	if err != nil {
		return fn(lineNo, raw, nil, err)
	}
	return fn(lineNo, raw, m, nil)
}

// trimEOL removes a trailing "\n" or "\r\n".
func trimEOL(line []byte) []byte {
	line = bytes.TrimSuffix(line, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r"))
}

// opensMultiline reports whether line starts a JSON object or array that it
// leaves open, as the first line of a pretty-printed message does.
func opensMultiline(line []byte) bool {
	line = bytes.TrimLeft(line, " \t")
	if len(line) == 0 || line[0] != '{' && line[0] != '[' {
		return false
	}
	depth, inString, escaped := 0, false, false
	for _, c := range line {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case inString:
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
		}
	}
	// A string cannot span lines, so an open string means a broken line.
	return depth > 0 && !inString
}

// lineReader splits input into lines without ever holding more than
// MaxSize+2 bytes of one.
type lineReader struct {
	br *bufio.Reader
}

// next returns the next line with its terminator, as a fresh slice. For a
// line too long to be a message it returns instead the line's length without
// terminator, having skipped it. At the end of the input it returns io.EOF.
func (lr *lineReader) next() (line []byte, over int64, err error) {
	b, err := lr.br.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, 0, err
		}
		if len(b) == 0 { // only at the end of the input
			return nil, 0, io.EOF
		}
		return bytes.Clone(b), 0, nil
	}
	// Too long: skip to the end of the line, counting.
	var prev, last byte // the line's last two bytes
	for {
		n := len(b)
		over += int64(n)
		switch {
		case n >= 2:
			prev, last = b[n-2], b[n-1]
		case n == 1:
			prev, last = last, b[0]
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			break
		}
		b, err = lr.br.ReadSlice('\n')
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, 0, err
	}
	if last == '\n' {
		over--
		if prev == '\r' {
			over--
		}
	}
	return nil, over, nil
}

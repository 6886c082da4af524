package message

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
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
// longer than MaxSize raw is nil, as it is not kept: its *Error's Oversized
// gives its size, the SHA-256 of the whole and its first bytes.
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
		if over != nil {
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
		d := newDigest()
		d.write(buf)
		if _, err := io.Copy(d, br); err != nil {
			return fmt.Errorf("message: reading the message starting on line %d: %w", lineNo, err)
		}
		return fn(lineNo, nil, nil, tooLarge(d.result()))
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
// line too long to be a message it returns instead a description of the
// line without its terminator (size, digest, first bytes), having skipped
// it. At the end of the input it returns io.EOF.
func (lr *lineReader) next() (line []byte, over *Oversized, err error) {
	b, err := lr.br.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, nil, err
		}
		if len(b) == 0 { // only at the end of the input
			return nil, nil, io.EOF
		}
		return bytes.Clone(b), nil, nil
	}
	// Too long: digest to the end of the line. The last two bytes seen are
	// held back until the line ends, as they may be its terminator.
	d := newDigest()
	held := make([]byte, 0, 2)
	for {
		switch n := len(b); {
		case n >= 2:
			d.write(held)
			d.write(b[:n-2])
			held = append(held[:0], b[n-2:]...)
		case n == 1 && len(held) == 2:
			d.write(held[:1])
			held = append(held[:0], held[1], b[0])
		default:
			held = append(held, b...)
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			break
		}
		b, err = lr.br.ReadSlice('\n')
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, err
	}
	if h, ok := bytes.CutSuffix(held, []byte("\n")); ok {
		held = bytes.TrimSuffix(h, []byte("\r"))
	}
	d.write(held)
	return nil, d.result(), nil
}

// digest computes an Oversized description of a message read in pieces.
type digest struct {
	h      hash.Hash
	size   int64
	prefix []byte
}

func newDigest() *digest { return &digest{h: sha256.New()} }

func (d *digest) write(p []byte) {
	if room := OversizedPrefix - len(d.prefix); room > 0 {
		d.prefix = append(d.prefix, p[:min(room, len(p))]...)
	}
	d.size += int64(len(p))
	d.h.Write(p)
}

// Write makes a digest an io.Writer, for io.Copy.
func (d *digest) Write(p []byte) (int, error) {
	d.write(p)
	return len(p), nil
}

func (d *digest) result() *Oversized {
	o := &Oversized{Size: d.size, Prefix: d.prefix}
	d.h.Sum(o.SHA256[:0])
	return o
}

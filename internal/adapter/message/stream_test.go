package message

import (
	"crypto/sha256"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

// result is one call of DecodeStream's callback.
type result struct {
	line int
	raw  string
	id   string // of the decoded message, or ""
	code string // of the error, or ""
}

func collect(t *testing.T, r io.Reader) []result {
	t.Helper()
	var got []result
	err := DecodeStream(r, testTypes, func(line int, raw []byte, m *Message, err error) error {
		res := result{line: line, raw: string(raw)}
		switch {
		case m != nil && err != nil:
			t.Errorf("line %d: both a message and error %v", line, err)
		case m != nil:
			res.id = m.ID
			if string(m.Raw) != string(raw) {
				t.Errorf("line %d: m.Raw = %q, raw = %q", line, m.Raw, raw)
			}
		case err != nil:
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("line %d: error %v is not an *Error", line, err)
			}
			res.code = e.Code
		default:
			t.Errorf("line %d: neither a message nor an error", line)
		}
		got = append(got, res)
		return nil
	})
	if err != nil {
		t.Fatalf("DecodeStream: %v", err)
	}
	return got
}

func withID(id string) string {
	return envelope(`"`+id+`"`, `"order.placed"`, dataWith(nil))
}

func checkResults(t *testing.T, got, want []result) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d results %+v, want %d %+v", len(got), got, len(want), want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if w.raw == "" {
			g.raw = "" // not checked
		}
		if g != w {
			t.Errorf("result %d = %+v, want %+v", i, g, w)
		}
	}
}

func TestDecodeStreamPrettyPrinted(t *testing.T) {
	in := "\n\n" + validMessage + "\n\n"
	checkResults(t, collect(t, strings.NewReader(in)), []result{{line: 3, raw: validMessage, id: "evt_91c2"}})

	// A pretty-printed message whose first line is just "{".
	pretty := "{\n  \"id\": \"evt_1\",\n  \"type\": \"order.placed\",\n  \"data\": " + dataWith(nil) + "\n}"
	checkResults(t, collect(t, strings.NewReader(pretty)), []result{{line: 1, raw: pretty, id: "evt_1"}})

	// Two pretty-printed messages are not JSON lines: the second is
	// trailing data.
	checkResults(t, collect(t, strings.NewReader(pretty+"\n"+pretty)), []result{{line: 1, code: CodeSyntax}})

	// A pretty-printed array is one (rejected) message.
	checkResults(t, collect(t, strings.NewReader("[\n"+pretty+"\n]")), []result{{line: 1, code: CodeNotObject}})
}

func TestDecodeStreamLines(t *testing.T) {
	in := withID("a") + "\n" +
		`{"id": "b", "type": "order.placed", "data": {"amount": 19.99}}` + "\n" +
		withID("c") + "\r\n" +
		"\n" +
		"  \t\r\n" +
		"not json\n" +
		withID("d") // no final newline
	checkResults(t, collect(t, strings.NewReader(in)), []result{
		{line: 1, raw: withID("a"), id: "a"},
		{line: 2, code: CodeMissing}, // data.order_id
		{line: 3, raw: withID("c"), id: "c"},
		{line: 6, raw: "not json", code: CodeSyntax},
		{line: 7, raw: withID("d"), id: "d"},
	})
}

func TestDecodeStreamLongLines(t *testing.T) {
	long := `{"id":"` + strings.Repeat("x", 3*MaxSize) + `"}`
	justOver := `{"id":"` + strings.Repeat("x", MaxSize+1-9) + `"}`
	if len(justOver) != MaxSize+1 {
		t.Fatalf("len(justOver) = %d", len(justOver))
	}
	// A valid message of exactly MaxSize bytes, padded with spaces.
	atLimit := withID("e")
	atLimit = atLimit[:len(atLimit)-2] + strings.Repeat(" ", MaxSize-len(atLimit)) + "}}"
	if len(atLimit) != MaxSize {
		t.Fatalf("len(atLimit) = %d", len(atLimit))
	}
	in := withID("a") + "\n" + long + "\n" + withID("b") + "\r\n" + justOver + "\r\n" + atLimit + "\n" + long
	got := collect(t, smallReads{strings.NewReader(in)})
	checkResults(t, got, []result{
		{line: 1, id: "a"},
		{line: 2, code: CodeTooLarge},
		{line: 3, id: "b"},
		{line: 4, code: CodeTooLarge},
		{line: 5, id: "e"},
		{line: 6, code: CodeTooLarge},
	})
	if got[1].raw != "" || got[5].raw != "" {
		t.Error("raw of an over-long line is not nil")
	}
}

// smallReads reads at most 1000 bytes at a time, so that lines straddle
// reads.
type smallReads struct{ r io.Reader }

func (s smallReads) Read(p []byte) (int, error) {
	if len(p) > 1000 {
		p = p[:1000]
	}
	return s.r.Read(p)
}

func TestDecodeStreamTooLargeReportsSize(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		size     int
	}{
		{"line", strings.Repeat("x", 2*MaxSize) + "\r\n" + withID("a"), 2 * MaxSize},
		{"last line", withID("a") + "\n" + strings.Repeat("x", 2*MaxSize), 2 * MaxSize},
		{"document", "{\n" + strings.Repeat(" ", 2*MaxSize) + "}\n", 2*MaxSize + 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var msgs []string
			err := DecodeStream(strings.NewReader(tt.in), testTypes, func(_ int, _ []byte, _ *Message, err error) error {
				if err != nil {
					msgs = append(msgs, err.Error())
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			want := "invalid message: message is " + strconv.Itoa(tt.size) + " bytes, the limit is 65536"
			if len(msgs) != 1 || msgs[0] != want {
				t.Errorf("errors %q, want [%q]", msgs, want)
			}
		})
	}
}

func TestDecodeStreamEmpty(t *testing.T) {
	for _, in := range []string{"", "\n", "\r\n \n\t\n"} {
		if got := collect(t, strings.NewReader(in)); len(got) != 0 {
			t.Errorf("%q: got %+v, want nothing", in, got)
		}
	}
}

func TestDecodeStreamStopsOnCallbackError(t *testing.T) {
	stop := errors.New("stop")
	calls := 0
	in := withID("a") + "\n" + withID("b") + "\n" + withID("c") + "\n"
	err := DecodeStream(strings.NewReader(in), testTypes, func(line int, _ []byte, _ *Message, _ error) error {
		calls++
		if line == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 2 {
		t.Errorf("err = %v after %d calls, want %v after 2", err, calls, stop)
	}
}

func TestDecodeStreamReadError(t *testing.T) {
	boom := errors.New("boom")
	in := io.MultiReader(strings.NewReader(withID("a")+"\n"+withID("b")), iotest.ErrReader(boom))
	var ids []string
	err := DecodeStream(in, testTypes, func(_ int, _ []byte, m *Message, _ error) error {
		if m != nil {
			ids = append(ids, m.ID)
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Errorf("err = %v, want %v", err, boom)
	}
	if len(ids) != 1 || ids[0] != "a" {
		t.Errorf("decoded %v before the error, want [a]", ids)
	}

	// In a pretty-printed document.
	in = io.MultiReader(strings.NewReader("{\n"), iotest.ErrReader(boom))
	err = DecodeStream(in, testTypes, func(int, []byte, *Message, error) error {
		t.Error("callback called")
		return nil
	})
	if !errors.Is(err, boom) {
		t.Errorf("err = %v, want %v", err, boom)
	}
}

func TestDecodeStreamOneByteReads(t *testing.T) {
	in := withID("a") + "\n\n" + validMessage
	got := collect(t, iotest.OneByteReader(strings.NewReader(in)))
	// Once the input is JSON lines, a message spread over lines is three
	// bad lines.
	checkResults(t, got, []result{{line: 1, id: "a"}, {line: 3, code: CodeSyntax}, {line: 4, code: CodeNotObject}, {line: 5, code: CodeNotObject}})
}

func TestOpensMultiline(t *testing.T) {
	for in, want := range map[string]bool{
		"{":                      true,
		"  [":                    true,
		`{"id": "a",`:            true,
		`{"id": "{[",`:           true,
		`{"id": "\"{",`:          true,
		`{"id": "a"}`:            false,
		`{"id": "a`:              false, // broken line
		`"{"`:                    false,
		"not json":               false,
		`}`:                      false,
		`{"a": {"b": [1, 2]}}`:   false,
		`{"a": {"b": [1, 2]}, {`: true,
	} {
		if got := opensMultiline([]byte(in)); got != want {
			t.Errorf("opensMultiline(%q) = %v, want %v", in, got, want)
		}
	}
}

// An oversized message is not kept, but its *Error identifies it: the size,
// the SHA-256 of the whole (without the line terminator) and its first
// OversizedPrefix bytes, so that two different oversized messages can be
// told apart and two copies of one recognised.
func TestDecodeStreamTooLargeIdentifiesTheMessage(t *testing.T) {
	a := `{"id":"a","pad":"` + strings.Repeat("a", 2*MaxSize) + `"}`
	b := `{"id":"b","pad":"` + strings.Repeat("b", MaxSize) + `"}`
	doc := "{\n" + strings.Repeat(" ", 2*MaxSize) + "}\n"
	for _, tt := range []struct {
		name, in string
		want     []string
	}{
		{"lines", a + "\r\n" + b + "\n" + a, []string{a, b, a}},
		{"small reads", a + "\n" + b + "\r\n", []string{a, b}},
		{"document", doc, []string{doc}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var r io.Reader = strings.NewReader(tt.in)
			if tt.name == "small reads" {
				r = smallReads{r}
			}
			var got []*Oversized
			err := DecodeStream(r, testTypes, func(_ int, raw []byte, _ *Message, err error) error {
				var me *Error
				if !errors.As(err, &me) || me.Code != CodeTooLarge || me.Oversized == nil {
					t.Fatalf("error %v, want a too_large *Error with Oversized", err)
				}
				if raw != nil {
					t.Error("raw of an oversized message is kept")
				}
				got = append(got, me.Oversized)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("%d oversized messages, want %d", len(got), len(tt.want))
			}
			for i, w := range tt.want {
				if got[i].Size != int64(len(w)) {
					t.Errorf("message %d: size %d, want %d", i, got[i].Size, len(w))
				}
				if got[i].SHA256 != sha256.Sum256([]byte(w)) {
					t.Errorf("message %d: digest is not the SHA-256 of the whole message", i)
				}
				if string(got[i].Prefix) != w[:OversizedPrefix] {
					t.Errorf("message %d: prefix %.40q…, want the first %d bytes", i, got[i].Prefix, OversizedPrefix)
				}
			}
		})
	}
}

func TestDecodeTooLargeIdentifiesTheMessage(t *testing.T) {
	raw := []byte(`{"id":"a","pad":"` + strings.Repeat("a", MaxSize) + `"}`)
	_, err := Decode(raw, testTypes)
	var me *Error
	if !errors.As(err, &me) || me.Oversized == nil {
		t.Fatalf("error %v, want a too_large *Error with Oversized", err)
	}
	if me.Oversized.Size != int64(len(raw)) || me.Oversized.SHA256 != sha256.Sum256(raw) || string(me.Oversized.Prefix) != string(raw[:OversizedPrefix]) {
		t.Errorf("Oversized = size %d, prefix %d bytes; want size %d and the digest and first bytes of the message", me.Oversized.Size, len(me.Oversized.Prefix), len(raw))
	}
}
